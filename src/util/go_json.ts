/**
 * @module
 * Strings as Go's encoding/json writes them (Go 1.22+): `\"`, `\\`, the short forms `\b \f \n
 * \r \t`, other controls and U+2028/U+2029 as `\u00xx`, `<`, `>`, `&` as `\u003c`... when HTML
 * escaping is on (json.Marshal's default), and a lone surrogate as `\ufffd`. Shared by the klog
 * JSON encoder and the container annotations, both of which must match Go byte for byte.
 */

// Printable ASCII without '"', '\\', '<', '>', '&': nothing to escape either way.
const PLAIN = /^[ !#-%'-;=?-[\]-~]*$/;

const SHORT: Readonly<Record<string, string>> = {
  "\b": "\\b",
  "\f": "\\f",
  "\n": "\\n",
  "\r": "\\r",
  "\t": "\\t",
};

/** Quotes `s` as encoding/json does; `escapeHTML` as json.Marshal (true) or an Encoder set false. */
export function goJsonString(s: string, escapeHTML = true): string {
  if (PLAIN.test(s)) return `"${s}"`;
  let out = '"';
  for (const ch of s) {
    const r = ch.codePointAt(0)!;
    if (ch === '"' || ch === "\\") out += "\\" + ch;
    else if (SHORT[ch] !== undefined) out += SHORT[ch];
    else if (r < 0x20 || r === 0x2028 || r === 0x2029 || (escapeHTML && "<>&".includes(ch))) {
      out += "\\u" + r.toString(16).padStart(4, "0");
    } else if (r >= 0xd800 && r < 0xe000) out += "\\ufffd";
    else out += ch;
  }
  return out + '"';
}
