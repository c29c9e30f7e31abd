/**
 * @module
 * Whether a registry location pattern matches an image, as upstream's `URLsMatchStr`: both
 * are parsed as schemeless URLs (Go's `url.Parse` of `"https://" + s`, whose errors a bad
 * `matchImages` entry reports), the ports must be equal, the hosts must have as many
 * dot-separated labels and each label must match its glob (Go's `filepath.Match`: `*`, `?`,
 * `[...]` classes with `^` negation, `\` escapes), and the pattern's path must be a prefix of the
 * image's. Used by credential provider plugins' `matchImages` and by the pull secrets' keyring.
 * Corresponds to upstream `pkg/credentialprovider/keyring.go` (`ParseSchemelessURL`, `SplitURL`,
 * `URLsMatch`, `URLsMatchStr`) and the parts of Go's `net/url` and `path/filepath` they use.
 */

import { goQuote } from "../klog/encode.ts";

/** A location that Go's `url.Parse` refuses; the message is Go's `*url.Error` text. */
export class UrlParseError extends Error {
  override name = "UrlParseError";
}

/** The host (with any port) and the unescaped path of a schemeless URL. */
export interface SchemelessUrl {
  readonly host: string;
  readonly path: string;
}

/** Upstream `ParseSchemelessURL`; throws {@link UrlParseError} where Go's parser fails. */
export function parseSchemelessUrl(schemeless: string): SchemelessUrl {
  const raw = `https://${schemeless}`;
  const hash = raw.indexOf("#");
  const u = hash < 0 ? raw : raw.slice(0, hash);
  const fail = (why: string, url = u): never => {
    throw new UrlParseError(`parse ${goQuote(url)}: ${why}`);
  };
  // deno-lint-ignore no-control-regex
  if (/[\x00-\x1f\x7f]/.test(raw)) fail("net/url: invalid control character in URL", raw);
  let rest = u.slice("https:".length);
  if (rest.endsWith("?") && rest.split("?").length === 2) rest = rest.slice(0, -1);
  else if (rest.includes("?")) rest = rest.slice(0, rest.indexOf("?"));
  // rest starts with "//": the authority runs to the next "/".
  let authority = rest.slice(2);
  let path = "";
  const slash = authority.indexOf("/");
  if (slash >= 0) {
    path = authority.slice(slash);
    authority = authority.slice(0, slash);
  }
  const at = authority.lastIndexOf("@");
  let host = authority;
  if (at >= 0) {
    const userinfo = authority.slice(0, at);
    if (!/^[A-Za-z0-9\-._:~!$&'()*+,;=%@]*$/.test(userinfo)) fail("net/url: invalid userinfo");
    host = authority.slice(at + 1);
  }
  let parsedHost = "";
  try {
    parsedHost = parseHost(host);
    path = unescape(path, "path");
    if (hash >= 0) unescape(raw.slice(hash + 1), "fragment");
  } catch (e) {
    if (e instanceof GoUrlError) fail(e.message);
    throw e;
  }
  return { host: parsedHost, path };
}

/** Upstream `URLsMatchStr`; a pattern or target that does not parse matches nothing. */
export function urlsMatch(glob: string, target: string): boolean {
  let g: SchemelessUrl;
  let t: SchemelessUrl;
  try {
    g = parseSchemelessUrl(glob);
    t = parseSchemelessUrl(target);
  } catch {
    return false;
  }
  const gh = splitUrl(g.host);
  const th = splitUrl(t.host);
  if (gh.port !== th.port) return false;
  if (gh.parts.length !== th.parts.length) return false;
  if (!t.path.startsWith(g.path)) return false;
  return gh.parts.every((part, i) => globMatch(part, th.parts[i] ?? ""));
}

/** Upstream `SplitURL`: the host's dot-separated labels and its port (Go's `net.SplitHostPort`). */
export function splitUrl(host: string): { parts: string[]; port: string } {
  const split = splitHostPort(host);
  const name = split ? split.host : host;
  return { parts: name.split("."), port: split ? split.port : "" };
}

/** Go's `net.SplitHostPort`, or undefined where it returns an error. */
function splitHostPort(hostport: string): { host: string; port: string } | undefined {
  const i = hostport.lastIndexOf(":");
  if (i < 0) return undefined;
  let host: string;
  if (hostport.startsWith("[")) {
    const end = hostport.indexOf("]");
    if (end < 0) return undefined;
    if (end + 1 !== i) return undefined;
    host = hostport.slice(1, end);
    if (hostport.slice(1).includes("[") || hostport.slice(end + 1).includes("]")) return undefined;
  } else {
    host = hostport.slice(0, i);
    if (host.includes(":") || hostport.includes("[") || hostport.includes("]")) return undefined;
  }
  return { host, port: hostport.slice(i + 1) };
}

/**
 * Go's `filepath.Match` for one host label (which holds no separator): `*` any run, `?` one
 * character, `[...]` a class (`^` negates, `a-z` ranges), `\` escapes. A malformed pattern
 * matches nothing, as upstream ignores `ErrBadPattern` and reports no match.
 */
export function globMatch(pattern: string, name: string): boolean {
  let re = "";
  let i = 0;
  // Every character but a letter or digit as a code point escape, valid in and out of classes.
  const lit = (c: string) => /^[A-Za-z0-9]$/.test(c) ? c : `\\u{${c.codePointAt(0)!.toString(16)}}`;
  while (i < pattern.length) {
    const c = pattern[i]!;
    if (c === "*") {
      re += "[^/]*";
      i++;
    } else if (c === "?") {
      re += "[^/]";
      i++;
    } else if (c === "\\") {
      if (i + 1 >= pattern.length) return false;
      re += lit(pattern[i + 1]!);
      i += 2;
    } else if (c === "[") {
      i++;
      let cls = "[";
      if (pattern[i] === "^") {
        cls += "^";
        i++;
      }
      let ranges = 0;
      for (;;) {
        if (i >= pattern.length) return false;
        if (pattern[i] === "]" && ranges > 0) {
          i++;
          break;
        }
        const lo = classChar();
        if (lo === undefined) return false;
        let hi = lo;
        if (pattern[i] === "-") {
          i++;
          const h = classChar();
          if (h === undefined) return false;
          hi = h;
          if (hi < lo) return false;
        }
        cls += hi === lo ? lit(lo) : `${lit(lo)}-${lit(hi)}`;
        ranges++;
      }
      re += `${cls}]`;
    } else {
      re += lit(c);
      i++;
    }
  }
  return new RegExp(`^${re}$`, "u").test(name);

  function classChar(): string | undefined {
    let ch = pattern[i];
    if (ch === undefined || ch === "-" || ch === "]") return undefined;
    if (ch === "\\") {
      i++;
      ch = pattern[i];
      if (ch === undefined) return undefined;
    }
    i++;
    return ch;
  }
}

/** An error of Go's URL parser, before `url.Parse` wraps it with the URL. */
class GoUrlError extends Error {}

/** Go's `parseHost` for the https scheme (Go 1.26: one colon at most outside brackets). */
function parseHost(host: string): string {
  const open = host.lastIndexOf("[");
  if (open > 0) throw new GoUrlError("invalid IP-literal");
  if (open === 0) {
    const close = host.lastIndexOf("]");
    if (close < 0) throw new GoUrlError("missing ']' in host");
    const colonPort = host.slice(close + 1);
    if (!validOptionalPort(colonPort)) {
      throw new GoUrlError(`invalid port ${goQuote(colonPort)} after host`);
    }
    const literal = unescape(host.slice(1, close), "host");
    if (!isIPv6Literal(literal)) {
      throw new GoUrlError(`invalid host: ParseAddr(${goQuote(literal)})`);
    }
    return `[${literal}]${colonPort}`;
  }
  const colon = host.indexOf(":");
  if (colon >= 0) {
    const colonPort = host.slice(colon);
    if (!validOptionalPort(colonPort)) {
      throw new GoUrlError(`invalid port ${goQuote(colonPort)} after host`);
    }
  }
  return unescape(host, "host");
}

function isIPv6Literal(s: string): boolean {
  const zone = s.indexOf("%");
  const addr = zone < 0 ? s : s.slice(0, zone);
  if (!addr.includes(":")) return false;
  try {
    return new URL(`http://[${addr}]/`).hostname !== "";
  } catch {
    return false;
  }
}

function validOptionalPort(port: string): boolean {
  return port === "" || /^:[0-9]*$/.test(port);
}

/** The characters Go's URL parser accepts unescaped in a host (its `encodeHost` table). */
const HOST_CHARS = /^[A-Za-z0-9!"$&'()*+,\-.:;<=>[\]_~]$/;

/** Go's `unescape` for a host, path or fragment: checks escapes, returns the decoded text. */
function unescape(s: string, mode: "host" | "path" | "fragment"): string {
  const bytes: number[] = [];
  const enc = new TextEncoder();
  for (let i = 0; i < s.length;) {
    const c = s[i]!;
    if (c === "%") {
      const hex = s.slice(i + 1, i + 3);
      if (!/^[0-9A-Fa-f]{2}$/.test(hex)) throw new GoUrlError(escapeError(s.slice(i, i + 3)));
      if (mode === "host" && parseInt(hex[0]!, 16) < 8 && hex !== "25") {
        throw new GoUrlError(escapeError(s.slice(i, i + 3)));
      }
      bytes.push(parseInt(hex, 16));
      i += 3;
      continue;
    }
    const code = c.codePointAt(0)!;
    if (mode === "host" && code < 0x80 && !HOST_CHARS.test(c)) {
      throw new GoUrlError(`invalid character ${goQuote(c)} in host name`);
    }
    const ch = String.fromCodePoint(code);
    bytes.push(...enc.encode(ch));
    i += ch.length;
  }
  return new TextDecoder().decode(new Uint8Array(bytes));
}

function escapeError(s: string): string {
  return `invalid URL escape ${goQuote(s)}`;
}
