/**
 * @module
 * A fake `iptables` and `ip6tables` for unit tests of util/iptables.ts and its callers: an
 * {@link IptablesExec} that keeps each family's tables in memory and answers the commands the
 * runner sends (`--version`, `-N`, `-X`, `-S`, `-C`, `-I`, `-A`, after an optional `-w [secs]`)
 * with the exit codes and messages iptables-nft 1.8.9 gives, records every call, and can be
 * told to fail a command, to be missing, or to lose its tables as a firewall reload does.
 */

import type { CommandResult, IptablesExec } from "../util/iptables.ts";

const BUILTIN: Record<string, readonly string[]> = {
  filter: ["INPUT", "FORWARD", "OUTPUT"],
  nat: ["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"],
  mangle: ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"],
};

/** One family's tables: table → chain → rules (each rule its arguments joined by spaces). */
type Tables = Map<string, Map<string, string[]>>;

function freshTables(): Tables {
  return new Map(
    Object.entries(BUILTIN).map(([t, chains]) => [t, new Map(chains.map((c) => [c, []]))]),
  );
}

/** Options of {@link FakeIptables}. */
export interface FakeIptablesOptions {
  /** What `--version` prints. @default "v1.8.9 (nf_tables)" */
  readonly version?: string;
  /** Programs that are not installed: running them rejects with NotFound. @default [] */
  readonly missing?: readonly string[];
}

/** In-memory iptables and ip6tables. */
export class FakeIptables {
  /** Every call, as [program, ...args]. */
  readonly calls: string[][] = [];
  readonly #tables = new Map<string, Tables>([
    ["iptables", freshTables()],
    ["ip6tables", freshTables()],
  ]);
  readonly #version: string;
  readonly #missing: Set<string>;
  /** Answers a call instead of the tables when it returns a result. */
  fail?: (cmd: string, args: readonly string[]) => CommandResult | undefined;

  constructor(opts: FakeIptablesOptions = {}) {
    this.#version = opts.version ?? "v1.8.9 (nf_tables)";
    this.#missing = new Set(opts.missing ?? []);
  }

  /** The runner's view of this fake. */
  readonly exec: IptablesExec = (cmd, args) => {
    this.calls.push([cmd, ...args]);
    if (this.#missing.has(cmd)) {
      return Promise.reject(new Deno.errors.NotFound(`Failed to spawn '${cmd}': entity not found`));
    }
    const failed = this.fail?.(cmd, args);
    if (failed) return Promise.resolve(failed);
    return Promise.resolve(this.#answer(cmd, args));
  };

  /** The calls made to `program`, without the program. */
  callsTo(program: string): string[][] {
    return this.calls.filter((c) => c[0] === program).map((c) => c.slice(1));
  }

  /** Whether `chain` exists in `table` of `program`'s family. */
  hasChain(program: string, table: string, chain: string): boolean {
    return this.#tables.get(program)?.get(table)?.has(chain) ?? false;
  }

  /** The rules of `chain`, in order. */
  rules(program: string, table: string, chain: string): string[] {
    return [...(this.#tables.get(program)?.get(table)?.get(chain) ?? [])];
  }

  /** A firewall reload: every rule and every user chain of every table gone (`-F`, `-X`). */
  flush(program: string): void {
    this.#tables.set(program, freshTables());
  }

  /** Deletes one chain behind the runner's back. */
  deleteChain(program: string, table: string, chain: string): void {
    this.#tables.get(program)?.get(table)?.delete(chain);
  }

  #answer(cmd: string, argv: readonly string[]): CommandResult {
    const name = `${cmd} ${this.#version}`;
    if (argv[0] === "--version") return { code: 0, output: `${cmd} ${this.#version}\n` };
    let args = [...argv];
    if (args[0] === "-w") args = /^[0-9]+$/.test(args[1] ?? "") ? args.slice(2) : args.slice(1);
    const [op, chain = "", t, table = "", ...rule] = args;
    const tables = this.#tables.get(cmd);
    const chains = tables?.get(table);
    if (t !== "-t" || !chains) {
      return { code: 2, output: `${name}: can't initialize iptables table '${table}'\n` };
    }
    const noChain = { code: 1, output: "iptables: No chain/target/match by that name.\n" };
    const rules = chains.get(chain);
    const spec = rule.join(" ");
    switch (op) {
      case "-N":
        if (rules) return { code: 1, output: `${name}: Chain already exists\n` };
        chains.set(chain, []);
        return { code: 0, output: "" };
      case "-X": {
        if (!rules) return noChain;
        const used = [...chains.values()].some((rs) => rs.some((r) => r.endsWith(`-j ${chain}`)));
        if (used || rules.length > 0 || BUILTIN[table]!.includes(chain)) {
          return { code: 1, output: `${name}: Directory not empty.\n` };
        }
        chains.delete(chain);
        return { code: 0, output: "" };
      }
      case "-S":
        return rules ? { code: 0, output: `-N ${chain}\n` } : noChain;
      case "-C":
        if (!rules) return noChain;
        return rules.includes(spec) ? { code: 0, output: "" } : {
          code: 1,
          output: "iptables: Bad rule (does a matching rule exist in that chain?).\n",
        };
      case "-I":
      case "-A": {
        if (!rules) return noChain;
        const target = rule[rule.indexOf("-j") + 1] ?? "";
        if (target.startsWith("KUBE-") && !chains.has(target)) {
          return { code: 2, output: `Warning: Extension ${target} revision 0 not supported\n` };
        }
        if (op === "-I") rules.unshift(spec);
        else rules.push(spec);
        return { code: 0, output: "" };
      }
      default:
        return { code: 2, output: `${name}: unknown option "${op}"\n` };
    }
  }
}
