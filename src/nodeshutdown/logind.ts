/**
 * @module
 * {@link Logind} over the system D-Bus, as upstream's `nodeshutdown/systemd` (DBusCon): reads
 * logind's InhibitDelayMaxUSec, raises it with a logind.conf drop-in and a SIGHUP through
 * systemd's KillUnit, watches PrepareForShutdown. The inhibitor lock is the one difference:
 * logind hands it out as a file descriptor, which Deno cannot receive over a unix socket, so
 * `systemd-inhibit` takes it with upstream's what/who/why/mode and holds it for as long as its
 * child (`cat` on a pipe from us) lives; closing the pipe releases it.
 */

import { join } from "node:path";
import { DBusConnection, DBusError, systemBusAddress } from "../util/dbus.ts";
import type { Logger } from "../klog/klog.ts";
import type { InhibitLock, Logind } from "./nodeshutdown_manager.ts";

const LOGIND_SERVICE = "org.freedesktop.login1";
const LOGIND_OBJECT = "/org/freedesktop/login1";
const LOGIND_INTERFACE = "org.freedesktop.login1.Manager";
/** Where upstream writes its logind override. */
export const LOGIND_CONFIG_DIRECTORY = "/etc/systemd/logind.conf.d";
export const KUBELET_LOGIND_CONF = "99-kubelet.conf";
/** Upstream's inhibitor: what, who, why and mode. */
export const INHIBIT_ARGS = [
  "--what=shutdown",
  "--who=kubelet",
  "--why=Kubelet needs time to handle node shutdown",
  "--mode=delay",
] as const;
/** What the inhibitor's child prints once systemd-inhibit holds the lock. */
const HELD = "inhibitor-lock-held";

/** Options of {@link connectLogind}. */
export interface LogindOptions {
  /** @default DBUS_SYSTEM_BUS_ADDRESS, else the well-known socket */
  readonly address?: string;
  /** @default "/etc/systemd/logind.conf.d" */
  readonly configDirectory?: string;
  /** @default "systemd-inhibit" (found on PATH) */
  readonly systemdInhibit?: string;
  readonly logger: Logger;
}

/** Connects to the system bus and returns logind as the shutdown manager uses it. */
export async function connectLogind(opts: LogindOptions, signal?: AbortSignal): Promise<Logind> {
  const address = opts.address ?? systemBusAddress((n) => Deno.env.get(n));
  const bus = await DBusConnection.connect({ address, signal });
  return new DBusLogind(bus, opts, address);
}

class DBusLogind implements Logind {
  constructor(
    readonly bus: DBusConnection,
    readonly opts: LogindOptions,
    readonly address: string,
  ) {}

  async currentInhibitDelayMs(signal?: AbortSignal): Promise<number> {
    let v;
    try {
      v = await this.bus.getProperty(
        LOGIND_SERVICE,
        LOGIND_OBJECT,
        LOGIND_INTERFACE,
        "InhibitDelayMaxUSec",
        signal,
      );
    } catch (e) {
      throw new DBusError(
        `failed reading InhibitDelayMaxUSec property from logind: ${(e as Error).message}`,
        (e as DBusError).dbusName,
        { cause: e },
      );
    }
    if (typeof v !== "bigint") {
      throw new DBusError("InhibitDelayMaxUSec from logind is not a uint64 as expected");
    }
    return Number(v / 1000n);
  }

  async overrideInhibitDelay(ms: number): Promise<void> {
    const dir = this.opts.configDirectory ?? LOGIND_CONFIG_DIRECTORY;
    try {
      await Deno.mkdir(dir, { recursive: true, mode: 0o755 });
    } catch (e) {
      throw new Error(`failed creating ${dir} directory: ${(e as Error).message}`, { cause: e });
    }
    const path = join(dir, KUBELET_LOGIND_CONF);
    const text = `# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=${
      Math.round(ms / 1000)
    }\n`;
    try {
      await Deno.writeTextFile(path, text, { mode: 0o644 });
    } catch (e) {
      throw new Error(
        `failed writing logind shutdown inhibit override file ${path}: ${(e as Error).message}`,
        { cause: e },
      );
    }
  }

  async reloadLogindConf(signal?: AbortSignal): Promise<void> {
    try {
      await this.bus.call({
        destination: "org.freedesktop.systemd1",
        path: "/org/freedesktop/systemd1",
        interface: "org.freedesktop.systemd1.Manager",
        member: "KillUnit",
        signature: "ssi",
        body: ["systemd-logind.service", "all", 1], // SIGHUP
      }, signal);
    } catch (e) {
      throw new Error(`unable to reload logind conf: ${(e as Error).message}`, { cause: e });
    }
  }

  async inhibitShutdown(signal?: AbortSignal): Promise<InhibitLock> {
    const program = this.opts.systemdInhibit ?? "systemd-inhibit";
    let child: Deno.ChildProcess;
    try {
      child = new Deno.Command(program, {
        args: [...INHIBIT_ARGS, "/bin/sh", "-c", `echo ${HELD}; exec cat >/dev/null`],
        env: { DBUS_SYSTEM_BUS_ADDRESS: this.address },
        stdin: "piped",
        stdout: "piped",
        stderr: "piped",
      }).spawn();
    } catch (e) {
      throw new Error(
        `failed creating systemd inhibitor: cannot run ${program}: ${(e as Error).message}`,
        {
          cause: e,
        },
      );
    }
    const stdin = child.stdin.getWriter();
    const held = readUntil(child.stdout, HELD);
    const stderr = new Response(child.stderr).text();
    const status = child.status;
    const timeout = AbortSignal.timeout(10_000);
    const abort = signal ? AbortSignal.any([signal, timeout]) : timeout;
    const aborted = new Promise<"aborted">((r) =>
      abort.addEventListener("abort", () => r("aborted"))
    );
    const first = await Promise.race([
      held.then(() => "held" as const, () => "exited" as const),
      status.then(() => "exited" as const),
      aborted,
    ]);
    if (first !== "held") {
      if (first === "aborted") {
        try {
          child.kill("SIGKILL");
        } catch { /* gone */ }
      }
      await status;
      const why = (await stderr).trim() ||
        `${program} ${first === "aborted" ? "did not take the lock in 10 s" : "exited"}`;
      throw new Error(`failed creating systemd inhibitor: ${why}`);
    }
    let released: Promise<void> | undefined;
    return {
      release: () => {
        released ??= (async () => {
          await stdin.close().catch(() => {});
          const t = setTimeout(() => {
            try {
              child.kill("SIGKILL");
            } catch { /* gone */ }
          }, 5_000);
          await status;
          clearTimeout(t);
          await stderr.catch(() => "");
        })();
        return released;
      },
    };
  }

  async monitorShutdown(
    onEvent: (shuttingDown: boolean) => void,
    signal?: AbortSignal,
  ): Promise<{ ended: Promise<void> }> {
    this.bus.onSignal((m) => {
      if (m.interface !== LOGIND_INTERFACE || m.member !== "PrepareForShutdown") return;
      if (typeof m.body[0] !== "boolean") {
        this.opts.logger.error(
          undefined,
          "Failed obtaining shutdown event, PrepareForShutdown event was not bool type as expected",
        );
        return;
      }
      onEvent(m.body[0]);
    });
    await this.bus.addMatch(
      `type='signal',interface='${LOGIND_INTERFACE}',member='PrepareForShutdown',path='${LOGIND_OBJECT}'`,
      signal,
    );
    return { ended: this.bus.closed };
  }

  close(): void {
    this.bus.close();
  }
}

/** Resolves once `text` appeared on the stream; keeps draining it after. */
async function readUntil(stream: ReadableStream<Uint8Array>, text: string): Promise<void> {
  const reader = stream.getReader();
  const dec = new TextDecoder();
  let seen = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error("stream ended");
    seen += dec.decode(value, { stream: true });
    if (seen.includes(text)) {
      void (async () => {
        while (!(await reader.read()).done) { /* drain */ }
      })().catch(() => {});
      return;
    }
  }
}
