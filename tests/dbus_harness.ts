/**
 * @module
 * A private D-Bus bus (Debian's `dbus-daemon` with a config of our own, listening on a socket in
 * a test directory) and a fake systemd-logind on it, built with the agent's own D-Bus client
 * (`src/util/dbus.ts`): it owns `org.freedesktop.login1`, answers the InhibitDelayMaxUSec property
 * and systemd's KillUnit, records the calls, and emits PrepareForShutdown when a test asks.
 * Also a stand-in `systemd-inhibit` for the agent's PATH: logind hands its inhibitor lock out as
 * a file descriptor, which a service written in Deno cannot send, so the stand-in records how it
 * was called and runs the command it was given (holding "the lock" as long as that lives), as
 * the real one does after logind's Inhibit call succeeded.
 */

import { join } from "node:path";
import { DBusConnection, DBusError } from "../src/util/dbus.ts";
import { aptInstallMissing } from "./apt.ts";

/** Installs Debian's dbus-daemon when it is missing (tests/setup.ts, as root). */
export async function ensureDBusPackages(): Promise<void> {
  await aptInstallMissing([{ pkg: "dbus-daemon", provides: ["dbus-daemon"] }]);
}

/** A running private bus. */
export interface PrivateBus extends AsyncDisposable {
  readonly address: string;
  stop(): Promise<void>;
}

/** Starts `dbus-daemon` on `<dir>/bus` and returns its address once it listens. */
export async function startPrivateBus(dir: string): Promise<PrivateBus> {
  await Deno.mkdir(dir, { recursive: true });
  const conf = join(dir, "bus.conf");
  const socket = join(dir, "bus");
  await Deno.writeTextFile(
    conf,
    `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path=${socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
    <allow user="*"/>
  </policy>
</busconfig>
`,
  );
  const child = new Deno.Command("dbus-daemon", {
    args: [`--config-file=${conf}`, "--nofork", "--print-address"],
    stdout: "piped",
    stderr: "null",
  }).spawn();
  const reader = child.stdout.getReader();
  let out = "";
  while (!out.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`dbus-daemon exited before printing its address (config ${conf})`);
    out += new TextDecoder().decode(value);
  }
  void (async () => {
    while (!(await reader.read()).done) { /* drain */ }
  })().catch(() => {});
  let stopped: Promise<void> | undefined;
  const stop = () =>
    stopped ??= (async () => {
      try {
        child.kill("SIGTERM");
      } catch { /* gone */ }
      await child.status;
    })();
  return { address: out.trim(), stop, [Symbol.asyncDispose]: stop };
}

/** A fake systemd-logind (and the systemd KillUnit it needs) on a bus. */
export interface FakeLogind {
  /** Method calls seen, as "Interface.Member(args)". */
  readonly calls: string[];
  /** InhibitDelayMaxUSec, in microseconds; a test may change it. */
  inhibitDelayUSec: bigint;
  prepareForShutdown(active: boolean): void;
  close(): void;
}

/** Serves logind's name on the bus at `address`. */
export async function startFakeLogind(
  address: string,
  opts: { inhibitDelayUSec: bigint },
): Promise<FakeLogind> {
  const bus = await DBusConnection.connect({ address });
  await bus.requestName("org.freedesktop.login1");
  await bus.requestName("org.freedesktop.systemd1");
  const fake: FakeLogind = {
    calls: [],
    inhibitDelayUSec: opts.inhibitDelayUSec,
    prepareForShutdown(active) {
      bus.emit(
        "/org/freedesktop/login1",
        "org.freedesktop.login1.Manager",
        "PrepareForShutdown",
        "b",
        [active],
      );
    },
    close: () => bus.close(),
  };
  bus.handle("org.freedesktop.DBus.Properties", "Get", (m) => {
    fake.calls.push(`Properties.Get(${m.body.join(", ")})`);
    if (m.body[0] !== "org.freedesktop.login1.Manager" || m.body[1] !== "InhibitDelayMaxUSec") {
      throw new DBusError(`no property ${m.body[1]}`, "org.freedesktop.DBus.Error.UnknownProperty");
    }
    return { signature: "v", body: [{ signature: "t", value: fake.inhibitDelayUSec }] };
  });
  bus.handle("org.freedesktop.systemd1.Manager", "KillUnit", (m) => {
    fake.calls.push(`KillUnit(${m.body.join(", ")})`);
    return {};
  });
  return fake;
}

/**
 * Writes `<dir>/systemd-inhibit`: appends "<pid> start <args>" to `<dir>/inhibit.log`, runs the
 * command after the options, then appends "<pid> end". Put `dir` first on the agent's PATH.
 */
export async function writeFakeSystemdInhibit(dir: string): Promise<{ log: string }> {
  await Deno.mkdir(dir, { recursive: true });
  const log = join(dir, "inhibit.log");
  const path = join(dir, "systemd-inhibit");
  await Deno.writeTextFile(
    path,
    `#!/bin/sh
echo "$$ start $*" >> '${log}'
while [ $# -gt 0 ]; do
  case "$1" in --*) shift ;; *) break ;; esac
done
"$@"
echo "$$ end" >> '${log}'
`,
    { mode: 0o755 },
  );
  return { log };
}

/** A fake systemd manager: transient units, with JobRemoved after each start or stop job. */
export interface FakeSystemd {
  /** Method calls, as "Member(args)" with properties as name=value. */
  readonly calls: string[];
  /** Units started and not stopped. */
  readonly units: Set<string>;
  /** Makes the next start job of `name` end with `result` instead of "done". */
  failNext(name: string, result: string): void;
  close(): void;
}

/** Serves org.freedesktop.systemd1's unit calls on the bus at `address`. */
export async function startFakeSystemd(address: string): Promise<FakeSystemd> {
  const bus = await DBusConnection.connect({ address });
  await bus.requestName("org.freedesktop.systemd1");
  const failures = new Map<string, string>();
  let jobs = 0;
  const fake: FakeSystemd = {
    calls: [],
    units: new Set(),
    failNext: (name, result) => void failures.set(name, result),
    close: () => bus.close(),
  };
  const props = (list: unknown) =>
    (list as [string, { value: unknown }][])
      .map(([k, v]) => `${k}=${Array.isArray(v.value) ? v.value.join(",") : String(v.value)}`)
      .join(" ");
  const job = (unit: string, result: string) => {
    const path = `/org/freedesktop/systemd1/job/${++jobs}`;
    // After the reply, as systemd sends it.
    setTimeout(() =>
      bus.emit(
        "/org/freedesktop/systemd1",
        "org.freedesktop.systemd1.Manager",
        "JobRemoved",
        "uoss",
        [jobs, path, unit, result],
      ), 1);
    return { signature: "o", body: [path] };
  };
  const manager = "org.freedesktop.systemd1.Manager";
  bus.handle(manager, "Subscribe", () => {
    fake.calls.push("Subscribe()");
    return {};
  });
  bus.handle(manager, "StartTransientUnit", (m) => {
    const [name, mode, list] = m.body as [string, string, unknown];
    fake.calls.push(`StartTransientUnit(${name}, ${mode}, ${props(list)})`);
    if (fake.units.has(name)) {
      throw new DBusError(`Unit ${name} already exists.`, "org.freedesktop.systemd1.UnitExists");
    }
    const result = failures.get(name) ?? "done";
    failures.delete(name);
    if (result === "done") fake.units.add(name);
    return job(name, result);
  });
  bus.handle(manager, "SetUnitProperties", (m) => {
    const [name, runtime, list] = m.body as [string, boolean, unknown];
    fake.calls.push(`SetUnitProperties(${name}, ${runtime}, ${props(list)})`);
    return {};
  });
  bus.handle(manager, "StopUnit", (m) => {
    const [name, mode] = m.body as [string, string];
    fake.calls.push(`StopUnit(${name}, ${mode})`);
    if (!fake.units.delete(name)) {
      throw new DBusError(`Unit ${name} not loaded.`, "org.freedesktop.systemd1.NoSuchUnit");
    }
    return job(name, "done");
  });
  return fake;
}
