/**
 * @module
 * What the benchmark suite (tests/bench_suite.ts) measures a process by, and how it prints the
 * figures: CPU time and resident memory from `/proc/<pid>` (any process, ours or the upstream
 * kubelet, read the same way), nearest-rank percentiles, a least-squares slope, and plain-text
 * tables. Pure functions except the `/proc` readers.
 */

/** Linux USER_HZ, the unit of the CPU times in /proc/<pid>/stat. */
const CLOCK_TICKS_PER_SECOND = 100;

/**
 * CPU seconds (user + system) process `pid` has used so far, including children it waited for
 * (`cutime`, `cstime`: the agents run `mount`, `df` and the like).
 */
export async function cpuSeconds(pid: number): Promise<number> {
  return statCpuSeconds(await Deno.readTextFile(`/proc/${pid}/stat`));
}

/** utime + stime + cutime + cstime of a /proc/<pid>/stat line, in seconds. */
function statCpuSeconds(stat: string): number {
  // Fields after the parenthesised command name start at field 3 (state).
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ").map(Number);
  const [utime, stime, cutime, cstime] = [f[11], f[12], f[13], f[14]];
  return ((utime ?? 0) + (stime ?? 0) + (cutime ?? 0) + (cstime ?? 0)) / CLOCK_TICKS_PER_SECOND;
}

/** Busy and total CPU seconds of the whole machine so far (/proc/stat's first line). */
export async function machineCpuSeconds(): Promise<{ busy: number; total: number }> {
  const line = (await Deno.readTextFile("/proc/stat")).split("\n", 1)[0] ?? "";
  // cpu user nice system idle iowait irq softirq steal guest guest_nice: the guest times are
  // already counted in user and nice.
  const f = line.trim().split(/\s+/).slice(1, 9).map(Number);
  const total = f.reduce((a, b) => a + b, 0);
  const idle = (f[3] ?? 0) + (f[4] ?? 0);
  return {
    busy: (total - idle) / CLOCK_TICKS_PER_SECOND,
    total: total / CLOCK_TICKS_PER_SECOND,
  };
}

/**
 * CPU seconds used so far by every process, by pid, with its command name (processes that
 * exit meanwhile are gone; what their parents waited for counts in the parents' figures).
 */
export async function allProcessCpu(): Promise<Map<number, { comm: string; cpu: number }>> {
  const out = new Map<number, { comm: string; cpu: number }>();
  for await (const e of Deno.readDir("/proc")) {
    const pid = Number(e.name);
    if (!Number.isInteger(pid)) continue;
    let stat: string;
    try {
      stat = await Deno.readTextFile(`/proc/${pid}/stat`);
    } catch {
      continue;
    }
    const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
    out.set(pid, { comm, cpu: statCpuSeconds(stat) });
  }
  return out;
}

/**
 * What each command name used between two {@link allProcessCpu} snapshots, largest first (a
 * process new in `after` counts whole). PID 1 is left out: what it holds is the orphans it
 * reaped, whoever they were. `names` renames pids ("kubelet" for a kubelet that runs as deno).
 */
export function cpuByName(
  before: ReadonlyMap<number, { comm: string; cpu: number }>,
  after: ReadonlyMap<number, { comm: string; cpu: number }>,
  names: ReadonlyMap<number, string> = new Map(),
): [string, number][] {
  const by = new Map<string, number>();
  for (const [pid, a] of after) {
    if (pid === 1) continue;
    const b = before.get(pid);
    const used = b && b.comm === a.comm ? a.cpu - b.cpu : a.cpu;
    const name = names.get(pid) ?? a.comm;
    if (used > 0) by.set(name, (by.get(name) ?? 0) + used);
  }
  return [...by].sort((x, y) => y[1] - x[1]);
}

/** CPU spent while a burst started: by the kubelet, by containerd, and the machine's load. */
export interface StartCpu {
  /** CPU seconds the kubelet used (none for the CRI floor, whose client is the bench). */
  readonly kubelet?: number;
  /** CPU seconds the containerd daemon used (its shims and runc are not its children). */
  readonly containerd: number;
  /** Share of the machine's CPUs busy, 0-1. */
  readonly machineBusy: number;
  /** CPU seconds by command name, largest first (see {@link cpuByName}). */
  readonly byName: [string, number][];
}

/**
 * Runs `work` and reports the CPU spent meanwhile by `kubeletPid` (when given), by
 * `containerdPid`, and by the whole machine, from a snapshot of every process before and after.
 */
export async function cpuDuring<T>(
  pids: { kubelet?: number; containerd: number },
  work: () => Promise<T>,
): Promise<{ result: T; cpu: StartCpu }> {
  const machineBefore = await machineCpuSeconds();
  const procsBefore = await allProcessCpu();
  const result = await work();
  const procsAfter = await allProcessCpu();
  const machineAfter = await machineCpuSeconds();
  const used = (pid: number) =>
    (procsAfter.get(pid)?.cpu ?? NaN) - (procsBefore.get(pid)?.cpu ?? NaN);
  const total = machineAfter.total - machineBefore.total;
  return {
    result,
    cpu: {
      kubelet: pids.kubelet === undefined ? undefined : used(pids.kubelet),
      containerd: used(pids.containerd),
      machineBusy: total > 0 ? (machineAfter.busy - machineBefore.busy) / total : NaN,
      byName: cpuByName(
        procsBefore,
        procsAfter,
        new Map([
          ...(pids.kubelet === undefined ? [] : [[pids.kubelet, "kubelet"] as const]),
          [Deno.pid, "bench"],
        ]),
      ),
    },
  };
}

/** VmRSS (now) and VmHWM (the peak so far) of `pid`, in MiB. */
export async function residentMiB(pid: number): Promise<{ rss: number; peak: number }> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  const kb = (field: string) =>
    Number(status.match(new RegExp(`^${field}:\\s+(\\d+) kB`, "m"))?.[1] ?? NaN);
  return { rss: kb("VmRSS") / 1024, peak: kb("VmHWM") / 1024 };
}

/** What {@link measureWindow} saw. */
export interface WindowFigures {
  /** Wall-clock length of the window, in s. */
  readonly seconds: number;
  /** CPU used over the window divided by its length: cores busy on average. */
  readonly cores: number;
  /** Mean of the VmRSS samples, in MiB. */
  readonly rssMiB: number;
  /** VmHWM at the end of the window, in MiB. */
  readonly peakMiB: number;
}

/**
 * Watches process `pid` for `ms`: its CPU over the whole window and its VmRSS sampled every
 * `sampleMs` (the first sample at the start).
 */
export async function measureWindow(
  pid: number,
  ms: number,
  sampleMs = 5_000,
  signal?: AbortSignal,
): Promise<WindowFigures> {
  const t0 = performance.now();
  const cpu0 = await cpuSeconds(pid);
  const samples: number[] = [];
  for (;;) {
    samples.push((await residentMiB(pid)).rss);
    const left = ms - (performance.now() - t0);
    if (left <= 0) break;
    await sleep(Math.min(sampleMs, left), signal);
  }
  const cpu1 = await cpuSeconds(pid);
  const seconds = (performance.now() - t0) / 1000;
  return {
    seconds,
    cores: (cpu1 - cpu0) / seconds,
    rssMiB: samples.reduce((a, b) => a + b, 0) / samples.length,
    peakMiB: (await residentMiB(pid)).peak,
  };
}

/** Resolves after `ms`, or rejects when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    signal?.throwIfAborted();
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** Nearest-rank percentile `p` (0-100) of `values` (any order); NaN when empty. */
export function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)] ?? NaN;
}

/** Least-squares slope of y over x; NaN with fewer than two distinct x. */
export function slope(points: readonly (readonly [number, number])[]): number {
  const n = points.length;
  const mx = points.reduce((a, [x]) => a + x, 0) / n;
  const my = points.reduce((a, [, y]) => a + y, 0) / n;
  let num = 0;
  let den = 0;
  for (const [x, y] of points) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  return den === 0 ? NaN : num / den;
}

/** `a / b` as "0.42×", or "n/a" when either is missing. */
export function ratio(a: number, b: number): string {
  return Number.isFinite(a) && Number.isFinite(b) && b !== 0 ? `${(a / b).toFixed(2)}×` : "n/a";
}

/** A plain-text table: a header row, a rule, the rows; the first column left-aligned. */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: readonly string[]) =>
    "| " + cells.map((c, i) => i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!)).join(
      " | ",
    ) + " |";
  const rule = "|" + widths.map((w, i) => i === 0 ? "-".repeat(w + 2) : "-".repeat(w + 1) + ":")
    .join("|") +
    "|";
  return [line(header), rule, ...rows.map(line)].join("\n");
}

/** Milliseconds, whole. */
export const ms = (v: number) =>
  Number.isFinite(v) ? `${(Math.round(v) || 0).toFixed(0)} ms` : "n/a";
/** MiB with one decimal. */
export const mib = (v: number) => Number.isFinite(v) ? `${v.toFixed(1)} MiB` : "n/a";
/**
 * Cores as millicores with one decimal: an idle kubelet uses 5-6 m, where whole millicores
 * would hide a difference of up to one (a 60 s window counts 10 ms clock ticks: ±0.2 m).
 */
export const millicores = (cores: number) =>
  Number.isFinite(cores) ? `${(cores * 1000).toFixed(1)} m` : "n/a";

/** CPU seconds as "1.23 s", or "n/a". */
export const seconds = (v: number | undefined) =>
  v !== undefined && Number.isFinite(v) ? `${v.toFixed(2)} s` : "n/a";

/** A share 0-1 as "42 %", or "n/a". */
export const percent = (v: number | undefined) =>
  v !== undefined && Number.isFinite(v) ? `${(v * 100).toFixed(0)} %` : "n/a";
