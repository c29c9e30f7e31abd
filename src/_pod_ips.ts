/**
 * @module
 * IP address parsing and printing as Go's `net` package does it, for the pod and host IPs of the
 * API pod status (private to kubelet_pods.ts): `utilnet.ParseIPSloppy` (IPv4 octets with leading
 * zeros are decimal) and `net.IP.String` (IPv4-mapped IPv6 prints as IPv4, IPv6 is lower-case
 * with the first longest run of two or more zero groups compressed to `::`).
 */

/** A parsed address: its family and Go's canonical text. */
export interface ParsedIP {
  readonly family: 4 | 6;
  readonly text: string;
}

/** Parses an IPv4 or IPv6 address; undefined when Go's ParseIPSloppy would return nil. */
export function parseIP(text: string): ParsedIP | undefined {
  const v4 = parseIPv4(text);
  if (v4 !== undefined) return { family: 4, text: v4.join(".") };
  const groups = parseIPv6(text);
  if (groups === undefined) return undefined;
  const mapped = groups.slice(0, 5).every((g) => g === 0) && groups[5] === 0xffff;
  if (mapped) {
    const hi = groups[6] ?? 0;
    const lo = groups[7] ?? 0;
    return { family: 4, text: [hi >> 8, hi & 0xff, lo >> 8, lo & 0xff].join(".") };
  }
  return { family: 6, text: formatIPv6(groups) };
}

function parseIPv4(text: string): number[] | undefined {
  const parts = text.split(".");
  if (parts.length !== 4) return undefined;
  const octets: number[] = [];
  for (const p of parts) {
    if (!/^[0-9]{1,3}$/.test(p)) return undefined;
    const n = Number.parseInt(p, 10);
    if (n > 255) return undefined;
    octets.push(n);
  }
  return octets;
}

function parseIPv6(text: string): number[] | undefined {
  if (!text.includes(":")) return undefined;
  let head = text;
  const tail: number[] = [];
  // An embedded IPv4 address in the last 32 bits.
  const lastColon = text.lastIndexOf(":");
  const last = text.slice(lastColon + 1);
  if (last.includes(".")) {
    const v4 = parseIPv4(last);
    if (v4 === undefined) return undefined;
    tail.push(((v4[0] ?? 0) << 8) | (v4[1] ?? 0), ((v4[2] ?? 0) << 8) | (v4[3] ?? 0));
    head = text.slice(0, lastColon + 1);
    if (!head.endsWith("::")) head = head.slice(0, -1);
  }
  const halves = head.split("::");
  if (halves.length > 2) return undefined;
  const parse = (s: string): number[] | undefined => {
    if (s === "") return [];
    const out: number[] = [];
    for (const g of s.split(":")) {
      if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return undefined;
      out.push(Number.parseInt(g, 16));
    }
    return out;
  };
  const left = parse(halves[0] ?? "");
  const right = halves.length === 2 ? parse(halves[1] ?? "") : [];
  if (left === undefined || right === undefined) return undefined;
  const present = left.length + right.length + tail.length;
  if (halves.length === 2) {
    if (present > 7) return undefined;
    return [...left, ...new Array<number>(8 - present).fill(0), ...right, ...tail];
  }
  if (present !== 8) return undefined;
  return [...left, ...tail];
}

function formatIPv6(groups: readonly number[]): string {
  // The first longest run of at least two zero groups.
  let bestStart = -1;
  let bestLen = 1;
  for (let i = 0; i < groups.length;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < groups.length && groups[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart < 0) return hex.join(":");
  return `${hex.slice(0, bestStart).join(":")}::${hex.slice(bestStart + bestLen).join(":")}`;
}
