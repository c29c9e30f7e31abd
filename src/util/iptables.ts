/**
 * @module
 * A runner around the host's `iptables` and `ip6tables` programs: create, test and delete
 * chains, ensure rules, and watch for a firewall flush with canary chains. The kubelet uses it
 * for its utility chains (kubelet_network_linux.ts); it runs only the two programs, through an
 * injectable {@link IptablesExec} (unit tests answer with a fake, the end-to-end test prefixes
 * `ip netns exec <ns>`). Corresponds to upstream `pkg/util/iptables/iptables.go` (runner,
 * NewBestEffort, EnsureChain, DeleteChain, ChainExists, EnsureRule, Monitor, Present, the
 * version and wait-flag probes).
 *
 * Which iptables backend is used is the host's choice, as upstream leaves it: the programs are run
 * by the names `iptables` and `ip6tables`, so the distribution's alternatives (iptables-legacy or
 * iptables-nft) decide; the KUBE-IPTABLES-HINT chain the kubelet makes tells other components
 * which one that was. Left out of upstream's runner, as the kubelet never calls them: FlushChain,
 * DeleteRule, SaveInto, Restore and RestoreAll (and the xtables lock they take), HasRandomFully,
 * and the `iptables-save` parsing upstream falls back to for rule checks on iptables older than
 * 1.4.11 (2011), which lacks `-C`: such a host gets an error from {@link IptablesRunner.ensureRule}.
 */

import type { Logger } from "../klog/klog.ts";
import { type Clock, realClock } from "./clock.ts";

/** The IP family a runner manages (upstream Protocol, whose values are v1.IPFamily's). */
export type Protocol = "IPv4" | "IPv6";

/** A built-in table. */
export type Table = "nat" | "filter" | "mangle";

/** A chain name, built-in (INPUT, OUTPUT, POSTROUTING...) or one the caller makes. */
export type Chain = string;

/** Where {@link IptablesRunner.ensureRule} puts a missing rule: `-I` first, `-A` last. */
export type RulePosition = "-I" | "-A";

/** upstream Prepend. */
export const PREPEND: RulePosition = "-I";
/** upstream Append. */
export const APPEND: RulePosition = "-A";

/** The IPv4 program; the permission set lists both (privilege/permission_set.ts). */
export const IPTABLES = "iptables";
/** The IPv6 program. */
export const IP6TABLES = "ip6tables";

/** What one run of a program gave: its exit code and its stdout followed by its stderr. */
export interface CommandResult {
  readonly code: number;
  readonly output: string;
}

/**
 * Runs `cmd args`; resolves with the exit code and output, or rejects when the program could not
 * be started (not installed, not permitted). `signal` kills it.
 */
export type IptablesExec = (
  cmd: string,
  args: readonly string[],
  signal?: AbortSignal,
) => Promise<CommandResult>;

const decoder = new TextDecoder();

/** Runs a program with Deno.Command, stdin closed, output collected. */
export const runIptablesCommand: IptablesExec = async (cmd, args, signal) => {
  const out = await new Deno.Command(cmd, {
    args: [...args],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal,
  }).output();
  return { code: out.code, output: decoder.decode(out.stdout) + decoder.decode(out.stderr) };
};

/** An iptables command failed; `exitCode` is the program's, when it ran. */
export class IptablesError extends Error {
  override name = "IptablesError";
  constructor(message: string, readonly exitCode?: number, options?: ErrorOptions) {
    super(message, options);
  }
}

/** iptables' exit status for "resource problem", e.g. the xtables lock timed out. */
const STATUS_RESOURCE_PROBLEM = 4;

/** upstream MinCheckVersion: `-C` (check whether a rule exists). */
const MIN_CHECK_VERSION = [1, 4, 11];
/** upstream WaitMinVersion: `-w`. */
const WAIT_MIN_VERSION = [1, 4, 20];
/** upstream WaitSecondsMinVersion: `-w <seconds>`. */
const WAIT_SECONDS_MIN_VERSION = [1, 4, 22];
/** upstream WaitSecondsValue. */
const WAIT_SECONDS = "5";
/** upstream checkRuleUsingCheck's deadline for one `-C`. */
const CHECK_RULE_TIMEOUT_MS = 5 * 60_000;
/** upstream iptablesFlushTimeout: how long the other canaries get to disappear. */
const FLUSH_TIMEOUT_MS = 5_000;
/** upstream iptablesFlushPollTime. */
const FLUSH_POLL_MS = 100;

const VERSION_PATTERN = /v([0-9]+(\.[0-9]+)+)/;

/** The version in `iptables --version`'s output, e.g. [1, 8, 9], or undefined. */
export function parseIptablesVersion(output: string): number[] | undefined {
  const m = VERSION_PATTERN.exec(output);
  return m ? m[1]!.split(".").map(Number) : undefined;
}

function atLeast(version: readonly number[], min: readonly number[]): boolean {
  for (let i = 0; i < Math.max(version.length, min.length); i++) {
    const a = version[i] ?? 0;
    const b = min[i] ?? 0;
    if (a !== b) return a > b;
  }
  return true;
}

/** The wait flag iptables `version` takes (upstream getIPTablesWaitFlag). */
export function iptablesWaitFlag(version: readonly number[]): string[] {
  if (atLeast(version, WAIT_SECONDS_MIN_VERSION)) return ["-w", WAIT_SECONDS];
  if (atLeast(version, WAIT_MIN_VERSION)) return ["-w"];
  return [];
}

/** Go's %q for the names and output this module quotes. */
const q = (s: string) => JSON.stringify(s);

/** What {@link IptablesRunner}'s callers use of it (upstream iptables.Interface, in part). */
export interface IptablesInterface {
  /** Creates the chain unless it exists; true when it existed. */
  ensureChain(table: Table, chain: Chain): Promise<boolean>;
  /** Adds the rule at `position` unless it exists; true when it existed. */
  ensureRule(
    position: RulePosition,
    table: Table,
    chain: Chain,
    ...args: string[]
  ): Promise<boolean>;
  isIPv6(): boolean;
  protocol(): Protocol;
}

/** Options of {@link IptablesRunner.create}. */
export interface IptablesRunnerOptions {
  readonly protocol: Protocol;
  /** @default {@link runIptablesCommand} */
  readonly exec?: IptablesExec;
  /** For the monitor's lines and the V(5) "Running" lines. */
  readonly logger?: Logger;
  /** The monitor's timers. @default realClock */
  readonly clock?: Clock;
}

/** Options of {@link IptablesRunner.monitor}. */
export interface MonitorOptions {
  /** The canary chain made in each table. */
  readonly canary: Chain;
  /** The tables; the first is the one polled every interval. Not empty. */
  readonly tables: readonly Table[];
  /** Called after a flush was seen, before the canaries are made again. */
  readonly reload: () => unknown;
  readonly intervalMs: number;
  /** Stops the monitor, which then deletes its canaries. */
  readonly signal: AbortSignal;
}

/** A command's outcome in upstream's terms: no error, or the error's text and exit code. */
interface RunResult {
  readonly output: string;
  /** "exit status N" or why the program did not start; undefined on success. */
  readonly error?: string;
  readonly code?: number;
}

const NO_LOGGER: Logger = {
  info() {},
  warning() {},
  error() {},
  v: () => ({ enabled: false, info() {} }),
  with: () => NO_LOGGER,
};

/** Runs one family's iptables program (upstream `runner`). Commands run one at a time. */
export class IptablesRunner implements IptablesInterface {
  readonly #protocol: Protocol;
  readonly #exec: IptablesExec;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #hasCheck: boolean;
  readonly #waitFlag: readonly string[];
  #queue: Promise<unknown> = Promise.resolve();

  private constructor(
    opts: IptablesRunnerOptions,
    hasCheck: boolean,
    waitFlag: readonly string[],
  ) {
    this.#protocol = opts.protocol;
    this.#exec = opts.exec ?? runIptablesCommand;
    this.#logger = opts.logger ?? NO_LOGGER;
    this.#clock = opts.clock ?? realClock;
    this.#hasCheck = hasCheck;
    this.#waitFlag = waitFlag;
  }

  /**
   * A runner for `opts.protocol`, its flags chosen from `iptables --version` (upstream
   * newInternal). A program that does not run gives a runner whose every command fails the same
   * way, as upstream's.
   */
  static async create(opts: IptablesRunnerOptions): Promise<IptablesRunner> {
    const exec = opts.exec ?? runIptablesCommand;
    let version: number[] | undefined;
    try {
      const out = await exec(iptablesCommand(opts.protocol), ["--version"]);
      if (out.code === 0) version = parseIptablesVersion(out.output);
    } catch {
      // Not installed: every command fails, and Present says so.
    }
    if (!version) return new IptablesRunner(opts, false, []);
    return new IptablesRunner(opts, atLeast(version, MIN_CHECK_VERSION), iptablesWaitFlag(version));
  }

  isIPv6(): boolean {
    return this.#protocol === "IPv6";
  }

  protocol(): Protocol {
    return this.#protocol;
  }

  /** `-N`: exit 1 means the chain is there already (true). */
  ensureChain(table: Table, chain: Chain): Promise<boolean> {
    return this.#serial(async () => {
      const r = await this.#run("-N", [chain, "-t", table]);
      if (r.error === undefined) return false;
      if (r.code === 1) return true;
      throw new IptablesError(`error creating chain ${q(chain)}: ${r.error}: ${r.output}`, r.code);
    });
  }

  /** `-X`; a chain that is not there is an error. */
  deleteChain(table: Table, chain: Chain): Promise<void> {
    return this.#serial(async () => {
      const r = await this.#run("-X", [chain, "-t", table]);
      if (r.error !== undefined) {
        throw new IptablesError(
          `error deleting chain ${q(chain)}: ${r.error}: ${r.output}`,
          r.code,
        );
      }
    });
  }

  /** `-S`: true when the chain is there; an error (with the exit code) when it is not or `-S` fails. */
  chainExists(table: Table, chain: Chain): Promise<boolean> {
    return this.#serial(() => this.#chainExists(table, chain));
  }

  async #chainExists(table: Table, chain: Chain): Promise<boolean> {
    const r = await this.#run("-S", [chain, "-t", table]);
    if (r.error !== undefined) {
      throw new IptablesError(
        `error listing chain ${q(chain)} in table ${q(table)}: ${r.error}: ${r.output}`,
        r.code,
      );
    }
    return true;
  }

  /** `-C`, then `-I` or `-A` when the rule is missing. */
  ensureRule(
    position: RulePosition,
    table: Table,
    chain: Chain,
    ...args: string[]
  ): Promise<boolean> {
    return this.#serial(async () => {
      if (await this.#checkRule(table, chain, args)) return true;
      const r = await this.#run(position, [chain, "-t", table, ...args]);
      if (r.error !== undefined) {
        throw new IptablesError(`error appending rule: ${r.error}: ${r.output}`, r.code);
      }
      return false;
    });
  }

  async #checkRule(table: Table, chain: Chain, args: readonly string[]): Promise<boolean> {
    if (!this.#hasCheck) {
      throw new IptablesError(
        `error checking rule: ${iptablesCommand(this.#protocol)} older than 1.4.11 lacks -C ` +
          "(upstream parses iptables-save instead, which this agent does not)",
      );
    }
    const timeout = AbortSignal.timeout(CHECK_RULE_TIMEOUT_MS);
    const r = await this.#run("-C", [chain, "-t", table, ...args], timeout);
    if (timeout.aborted) throw new IptablesError("timed out while checking rules");
    if (r.error === undefined) return true;
    // iptables uses exit 1 for "the rule is not there", as against a malformed command line.
    if (r.code === 1) return false;
    throw new IptablesError(`error checking rule: ${r.error}: ${r.output}`, r.code);
  }

  /** Whether this family works: the nat table's POSTROUTING chain can be listed (upstream Present). */
  async present(): Promise<boolean> {
    try {
      return await this.chainExists("nat", "POSTROUTING");
    } catch {
      return false;
    }
  }

  /**
   * Watches for a flush by an outside tool (a firewall reload): makes `canary` in every table,
   * polls the first table every interval, and once the canary is gone there (and, within 5 s, from
   * the others) calls `reload` and starts over. Canaries it cannot make are retried every
   * interval. Resolves when `signal` aborts, after deleting the canaries (upstream Monitor).
   */
  async monitor(opts: MonitorOptions): Promise<void> {
    const { canary, tables, signal } = opts;
    const first = tables[0];
    if (first === undefined) throw new IptablesError("monitor needs at least one table");
    const sleep = (ms: number) => this.#clock.sleep(ms, signal).then(() => true, () => false);
    for (;;) {
      // PollImmediateUntil: the canaries, retried until they are all made.
      while (!signal.aborted && !(await this.#ensureCanaries(canary, tables))) {
        if (!(await sleep(opts.intervalMs))) break;
      }
      // PollUntil: every interval, until the canary is gone or the monitor stops.
      let flushed = false;
      while (!flushed && await sleep(opts.intervalMs)) {
        flushed = await this.#canaryDeleted(canary, first);
      }
      if (flushed) await this.#waitForOtherCanaries(canary, tables.slice(1), signal);
      if (!flushed || signal.aborted) {
        for (const table of tables) await this.deleteChain(table, canary).catch(() => {});
        return;
      }
      this.#logger.v(2).info("Reloading after iptables flush");
      await opts.reload();
    }
  }

  async #ensureCanaries(canary: Chain, tables: readonly Table[]): Promise<boolean> {
    for (const table of tables) {
      try {
        await this.ensureChain(table, canary);
      } catch (e) {
        this.#logger.error(e, "Could not set up iptables canary", { table, chain: canary });
        return false;
      }
    }
    return true;
  }

  async #canaryDeleted(canary: Chain, table: Table): Promise<boolean> {
    try {
      await this.chainExists(table, canary);
      return false;
    } catch (e) {
      if (isResourceError(e)) {
        this.#logger.error(e, "Could not check for iptables canary", { table, chain: canary });
        return false;
      }
    }
    this.#logger.v(2).info("IPTables canary deleted", { table, chain: canary });
    return true;
  }

  /** Waits up to 5 s for the canaries of `tables` to go too, so the reload does not come early. */
  async #waitForOtherCanaries(
    canary: Chain,
    tables: readonly Table[],
    signal: AbortSignal,
  ): Promise<void> {
    const deadline = this.#clock.now() + FLUSH_TIMEOUT_MS;
    for (;;) {
      let gone = true;
      for (const table of tables) {
        try {
          await this.chainExists(table, canary);
          gone = false;
        } catch (e) {
          if (isResourceError(e)) gone = false;
        }
        if (!gone) break;
      }
      if (gone) return;
      if (this.#clock.now() + FLUSH_POLL_MS > deadline) {
        this.#logger.info("Inconsistent iptables state detected");
        return;
      }
      try {
        await this.#clock.sleep(FLUSH_POLL_MS, signal);
      } catch {
        return;
      }
    }
  }

  /** Runs `fn` after every command queued before it: one command at a time (upstream's mutex). */
  #serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#queue.then(fn, fn);
    this.#queue = run.catch(() => {});
    return run;
  }

  /** `<program> <wait flag> <op> <args>` (upstream runContext). */
  async #run(op: string, args: readonly string[], signal?: AbortSignal): Promise<RunResult> {
    const cmd = iptablesCommand(this.#protocol);
    const full = [...this.#waitFlag, op, ...args];
    this.#logger.v(5).info("Running", { command: cmd, arguments: full });
    try {
      const r = await this.#exec(cmd, full, signal);
      if (r.code === 0) return { output: r.output };
      return { output: r.output, error: `exit status ${r.code}`, code: r.code };
    } catch (e) {
      const error = e instanceof Deno.errors.NotFound
        ? `exec: ${q(cmd)}: executable file not found in $PATH`
        : (e as Error).message;
      return { output: "", error };
    }
  }
}

/** The program of `protocol`. */
export function iptablesCommand(protocol: Protocol): string {
  return protocol === "IPv6" ? IP6TABLES : IPTABLES;
}

/** Whether iptables could not attempt the request (exit 4, e.g. the lock timed out). */
function isResourceError(e: unknown): boolean {
  return e instanceof IptablesError && e.exitCode === STATUS_RESOURCE_PROBLEM;
}

/** Options of {@link newBestEffort}. */
export type BestEffortOptions = Omit<IptablesRunnerOptions, "protocol">;

/**
 * A runner for each family whose program works here, IPv4 first; none where neither does
 * (upstream NewBestEffort: partial or no iptables support is not an error).
 */
export async function newBestEffort(
  opts: BestEffortOptions = {},
): Promise<Map<Protocol, IptablesRunner>> {
  const runners = new Map<Protocol, IptablesRunner>();
  for (const protocol of ["IPv4", "IPv6"] as const) {
    const runner = await IptablesRunner.create({ ...opts, protocol });
    if (await runner.present()) runners.set(protocol, runner);
  }
  return runners;
}
