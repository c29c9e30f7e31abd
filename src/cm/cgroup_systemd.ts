/**
 * @module
 * The systemd cgroup driver's D-Bus side for `cgroup_manager.ts`: transient slices started,
 * updated and stopped through org.freedesktop.systemd1 on the system bus, as the
 * opencontainers/cgroups `systemd` managers do for upstream's kubelet (StartTransientUnit with
 * Wants=<parent slice>, DefaultDependencies=no and accounting on, the resources as unit
 * properties, waiting for the job's JobRemoved; SetUnitProperties; StopUnit). The cgroup files
 * are still written on cgroupfs afterwards, as those managers' Set does.
 */

import {
  DBusConnection,
  DBusError,
  type DBusValue,
  type DBusVariant,
  systemBusAddress,
} from "../util/dbus.ts";
import { cpuSharesToCPUWeight } from "./_writers.ts";

const SYSTEMD = "org.freedesktop.systemd1";
const SYSTEMD_PATH = "/org/freedesktop/systemd1";
const MANAGER = "org.freedesktop.systemd1.Manager";
/** How long a start or stop job may take (libcontainer's timeout). */
export const JOB_TIMEOUT_MS = 30_000;
const UINT64_MAX = 2n ** 64n - 1n;

/** One unit property, as StartTransientUnit takes it. */
export type UnitProperty = [string, DBusVariant];

/** What the cgroup manager asks of systemd. */
export interface SystemdUnits {
  /** Starts slice `name` under `parent` with `props`; an existing unit is fine. */
  startSlice(
    name: string,
    parent: string,
    props: UnitProperty[],
    signal?: AbortSignal,
  ): Promise<void>;
  setProperties(name: string, props: UnitProperty[], signal?: AbortSignal): Promise<void>;
  /** Stops the unit; one that does not exist is fine. */
  stopUnit(name: string, signal?: AbortSignal): Promise<void>;
  close(): void;
}

/** The limits the cgroup manager sets, as systemd unit properties. */
export interface SliceResources {
  cpuShares?: bigint;
  cpuQuota?: bigint;
  cpuPeriod?: bigint;
  memory?: bigint;
  pidsLimit?: bigint;
}

const t = (value: bigint): DBusVariant => ({ signature: "t", value });
const b = (value: boolean): DBusVariant => ({ signature: "b", value });

/** The resource properties of a unit (libcontainer genV1/genV2ResourcesProperties). */
export function resourceProperties(r: SliceResources, v2: boolean): UnitProperty[] {
  const out: UnitProperty[] = [];
  if (r.cpuShares !== undefined && r.cpuShares !== 0n) {
    out.push(
      v2 ? ["CPUWeight", t(cpuSharesToCPUWeight(r.cpuShares))] : ["CPUShares", t(r.cpuShares)],
    );
  }
  if (r.cpuQuota !== undefined) {
    if (r.cpuQuota < 0n) out.push(["CPUQuotaPerSecUSec", t(UINT64_MAX)]);
    else if (r.cpuQuota > 0n && (r.cpuPeriod ?? 0n) > 0n) {
      // systemd takes the quota per second in whole percents of a CPU: round up to 10 ms.
      let perSec = (r.cpuQuota * 1_000_000n) / r.cpuPeriod!;
      if (perSec % 10_000n !== 0n) perSec = (perSec / 10_000n + 1n) * 10_000n;
      out.push(["CPUQuotaPerSecUSec", t(perSec)]);
    }
  }
  if (r.memory !== undefined && r.memory !== 0n) {
    out.push([v2 ? "MemoryMax" : "MemoryLimit", t(r.memory < 0n ? UINT64_MAX : r.memory)]);
  }
  if (r.pidsLimit !== undefined && r.pidsLimit !== 0n) {
    out.push(["TasksMax", t(r.pidsLimit < 0n ? UINT64_MAX : r.pidsLimit)]);
  }
  return out;
}

/** The properties every slice the kubelet starts has, before its resources. */
export function sliceProperties(name: string, parent: string): UnitProperty[] {
  return [
    ["Description", { signature: "s", value: `libcontainer container ${name}` }],
    ["Wants", { signature: "as", value: [parent] }],
    ["DefaultDependencies", b(false)],
    ["MemoryAccounting", b(true)],
    ["CPUAccounting", b(true)],
    ["IOAccounting", b(true)],
    ["TasksAccounting", b(true)],
  ];
}

/** Connects to systemd on the system bus (DBUS_SYSTEM_BUS_ADDRESS, else the well-known socket). */
export async function connectSystemd(
  address?: string,
  signal?: AbortSignal,
): Promise<SystemdUnits> {
  const bus = await DBusConnection.connect({
    address: address ?? systemBusAddress((n) => Deno.env.get(n)),
    signal,
  });
  const units = new DBusSystemdUnits(bus);
  try {
    await bus.addMatch(`type='signal',interface='${MANAGER}',member='JobRemoved'`, signal);
    await units.call("Subscribe", "", [], signal);
  } catch (e) {
    bus.close();
    throw new DBusError(`cannot talk to systemd over D-Bus: ${(e as Error).message}`, undefined, {
      cause: e,
    });
  }
  return units;
}

class DBusSystemdUnits implements SystemdUnits {
  /** Jobs removed whose waiter has not come yet (a reply may arrive after the signal). */
  readonly #done = new Map<string, string>();
  readonly #waiters = new Map<string, (result: string) => void>();

  constructor(readonly bus: DBusConnection) {
    bus.onSignal((m) => {
      if (m.interface !== MANAGER || m.member !== "JobRemoved") return;
      const job = String(m.body[1]);
      const result = String(m.body[3]);
      const waiter = this.#waiters.get(job);
      if (waiter) return waiter(result);
      this.#done.set(job, result);
      if (this.#done.size > 256) this.#done.delete(this.#done.keys().next().value!);
    });
  }

  call(member: string, signature: string, body: DBusValue[], signal?: AbortSignal) {
    return this.bus.call(
      { destination: SYSTEMD, path: SYSTEMD_PATH, interface: MANAGER, member, signature, body },
      signal,
    );
  }

  async #wait(job: string, what: string, signal?: AbortSignal): Promise<void> {
    let result = this.#done.get(job);
    this.#done.delete(job);
    if (result === undefined) {
      const got = Promise.withResolvers<string>();
      this.#waiters.set(job, got.resolve);
      const timeout = AbortSignal.timeout(JOB_TIMEOUT_MS);
      const abort = signal ? AbortSignal.any([signal, timeout]) : timeout;
      const onAbort = () =>
        got.reject(
          signal?.aborted
            ? signal.reason
            : new Error(`${what}: timed out after ${JOB_TIMEOUT_MS / 1000}s`),
        );
      abort.addEventListener("abort", onAbort, { once: true });
      try {
        result = await got.promise;
      } finally {
        this.#waiters.delete(job);
        abort.removeEventListener("abort", onAbort);
      }
    }
    if (result !== "done") throw new Error(`${what}: got \`${result}\``);
  }

  async startSlice(name: string, parent: string, props: UnitProperty[], signal?: AbortSignal) {
    const what = `error creating systemd unit \`${name}\``;
    let job: string;
    try {
      [job] = (await this.call(
        "StartTransientUnit",
        "ssa(sv)a(sa(sv))",
        [name, "replace", [...sliceProperties(name, parent), ...props], []],
        signal,
      )) as [string];
    } catch (e) {
      if (e instanceof DBusError && e.dbusName === "org.freedesktop.systemd1.UnitExists") return;
      throw new Error(`${what}: ${(e as Error).message}`, { cause: e });
    }
    await this.#wait(job, what, signal);
  }

  async setProperties(name: string, props: UnitProperty[], signal?: AbortSignal) {
    if (props.length === 0) return;
    try {
      await this.call("SetUnitProperties", "sba(sv)", [name, true, props], signal);
    } catch (e) {
      throw new Error(
        `error setting properties of systemd unit \`${name}\`: ${(e as Error).message}`,
        {
          cause: e,
        },
      );
    }
  }

  async stopUnit(name: string, signal?: AbortSignal) {
    const what = `error stopping systemd unit \`${name}\``;
    let job: string;
    try {
      [job] = (await this.call("StopUnit", "ss", [name, "replace"], signal)) as [string];
    } catch (e) {
      if (e instanceof DBusError && e.dbusName === "org.freedesktop.systemd1.NoSuchUnit") return;
      throw new Error(`${what}: ${(e as Error).message}`, { cause: e });
    }
    await this.#wait(job, what, signal);
  }

  close() {
    this.bus.close();
  }
}
