/**
 * @module
 * Whether a pattern parses as Go's `regexp/syntax.Parse(pattern, syntax.Perl)` would, and Go's
 * error text when it does not (`error parsing regexp: missing closing ): ` + "`(a`"). The node
 * log query validates its `pattern` parameter with it before handing the pattern to journalctl's
 * `--grep` (which reads it as PCRE2), so a pattern Go's RE2 syntax refuses (a lookahead, a
 * backreference) is refused with upstream's words. Private to server/ (journal.ts).
 *
 * Follows the checks of Go 1.26's parser (parse.go): groups and Perl flags, named captures,
 * repetition operators and counts (nested counts above 1000), escapes, character classes, POSIX
 * and Unicode classes. Not followed: the size and height limits of the parse tree ("expression
 * too large", "expression nests too deeply" from deep repetitions), which only very large
 * patterns reach; a nesting of more than 1000 groups is refused as Go does.
 */

const ERR = {
  invalidCharClass: "invalid character class",
  invalidCharRange: "invalid character class range",
  invalidEscape: "invalid escape sequence",
  invalidNamedCapture: "invalid named capture",
  invalidPerlOp: "invalid or unsupported Perl syntax",
  invalidRepeatOp: "invalid nested repetition operator",
  invalidRepeatSize: "invalid repeat count",
  missingBracket: "missing closing ]",
  missingParen: "missing closing )",
  missingRepeatArgument: "missing argument to repetition operator",
  trailingBackslash: "trailing backslash at end of expression",
  unexpectedParen: "unexpected )",
  nestingDepth: "expression nests too deeply",
} as const;

/** Go's canonical names (canonicalName) of the Unicode classes `\p{...}` accepts, Go 1.26. */
const UNICODE_CLASSES = new Set(
  ("Adlam Ahom Any Arabic Armenian Ascii Assigned Avestan Balinese Bamum Batak Bengali " +
    "Bhaiksuki Bopomofo Brahmi Braille Buginese Buhid C Carian Casedletter Cc Cf Chakma Cham " +
    "Cherokee Chorasmian Closepunctuation Cn Cntrl Co Combiningmark Common " +
    "Connectorpunctuation Control Coptic Cs Cuneiform Currencysymbol Cypriot Cyrillic " +
    "Dashpunctuation Decimalnumber Deseret Devanagari Digit Dogra Duployan Elbasan Elymaic " +
    "Enclosingmark Ethiopic Finalpunctuation Format Georgian Glagolitic Gothic Grantha Greek " +
    "Gujarati Gurmukhi Han Hangul Hanunoo Hatran Hebrew Hiragana Inherited Initialpunctuation " +
    "Javanese Kaithi Kannada Katakana Kawi Kharoshthi Khmer Khojki Khudawadi L Lao Latin Lc " +
    "Lepcha Letter Letternumber Limbu Lineseparator Lisu Ll Lm Lo Lowercaseletter Lt Lu Lycian " +
    "Lydian M Mahajani Makasar Malayalam Mandaic Manichaean Marchen Mark Mathsymbol Mc Me " +
    "Medefaidrin Miao Mn Modi Modifierletter Modifiersymbol Mongolian Mro Multani Myanmar N " +
    "Nabataean Nandinagari Nd Newa Nko Nl No Nonspacingmark Number Nushu Ogham Openpunctuation " +
    "Oriya Osage Osmanya Other Otherletter Othernumber Otherpunctuation Othersymbol P Palmyrene " +
    "Paragraphseparator Pc Pd Pe Pf Phoenician Pi Po Privateuse Ps Punct Punctuation Rejang " +
    "Runic S Samaritan Saurashtra Sc Separator Sharada Shavian Siddham Sinhala Sk Sm So Sogdian " +
    "Soyombo Spaceseparator Spacingmark Sundanese Surrogate Symbol Syriac Tagalog Tagbanwa " +
    "Takri Tamil Tangsa Tangut Telugu Thaana Thai Tibetan Tifinagh Tirhuta Titlecaseletter Toto " +
    "Ugaritic Unassigned Uppercaseletter Vai Vithkuqi Wancho Yezidi Yi Z Zl Zp Zs").split(" "),
);

const POSIX_CLASSES = new Set(
  ["alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower", "print", "punct"]
    .concat(["space", "upper", "word", "xdigit"])
    .flatMap((n) => [`[:${n}:]`, `[:^${n}:]`]),
);

const MAX_REPEAT = 1000;
const MAX_NESTING = 1000;
const MAX_RUNE = 0x10ffff;

/** A Go regexp syntax error: the code's text and the offending fragment. */
class SyntaxFault {
  constructor(readonly code: string, readonly expr: string) {}
}

/** A node of the parse stack: a group marker, an alternation bar, or an expression. */
interface Node {
  readonly kind: "paren" | "bar" | "expr";
  /** For a repetition: its count (max, or min when unbounded). */
  readonly count?: number;
  readonly subs: Node[];
}

function canonicalName(name: string): string {
  let out = "";
  let first = true;
  for (const c of name) {
    if (c === "_" || c === "-" || c === " ") continue;
    if (first) {
      out += /[a-z]/.test(c) ? c.toUpperCase() : c;
      first = false;
    } else {
      out += /[A-Z]/.test(c) ? c.toLowerCase() : c;
    }
  }
  return out;
}

function isAlnum(c: string): boolean {
  return /^[A-Za-z0-9]$/.test(c);
}

function unhex(c: string): number {
  return /^[0-9A-Fa-f]$/.test(c) ? parseInt(c, 16) : -1;
}

/** The first code point of `s`, as Go's nextRune reads a rune. */
function firstRune(s: string): string {
  return String.fromCodePoint(s.codePointAt(0)!);
}

/** Go's repeatIsValid: no path of nested counts multiplies past `n`. */
function repeatIsValid(node: Node, n: number): boolean {
  if (node.count !== undefined) {
    const m = node.count;
    if (m === 0) return true;
    if (m > n) return false;
    if (m > 0) n = Math.floor(n / m);
  }
  return node.subs.every((s) => repeatIsValid(s, n));
}

class Parser {
  stack: Node[] = [];
  depth = 0;
  constructor(readonly whole: string) {}

  push(node: Node): void {
    this.stack.push(node);
  }

  /** Collapses what is above the topmost marker into one node (concat, then alternate). */
  collapse(): void {
    let i = this.stack.length;
    while (i > 0 && this.stack[i - 1]!.kind !== "paren") i--;
    const above = this.stack.splice(i);
    const exprs = above.filter((n) => n.kind === "expr");
    this.stack.push({ kind: "expr", subs: exprs });
  }

  rightParen(): void {
    this.collapse();
    const n = this.stack.length;
    if (n < 2 || this.stack[n - 2]!.kind !== "paren") {
      throw new SyntaxFault(ERR.unexpectedParen, this.whole);
    }
    const inner = this.stack.pop()!;
    this.stack.pop();
    this.depth--;
    this.push({ kind: "expr", subs: [inner] });
  }

  leftParen(): void {
    this.depth++;
    if (this.depth > MAX_NESTING) throw new SyntaxFault(ERR.nestingDepth, this.whole);
    this.push({ kind: "paren", subs: [] });
  }

  /** Applies a repetition to the top of the stack (Go's parser.repeat, Perl flags). */
  repeat(
    count: number | undefined,
    bounds: { min: number; max: number } | undefined,
    before: string,
    after: string,
    lastRepeat: string,
  ): string {
    if (after.startsWith("?")) after = after.slice(1);
    if (lastRepeat !== "") {
      throw new SyntaxFault(
        ERR.invalidRepeatOp,
        lastRepeat.slice(0, lastRepeat.length - after.length),
      );
    }
    const top = this.stack[this.stack.length - 1];
    if (top === undefined || top.kind !== "expr") {
      throw new SyntaxFault(
        ERR.missingRepeatArgument,
        before.slice(0, before.length - after.length),
      );
    }
    const node: Node = { kind: "expr", count, subs: [top] };
    this.stack[this.stack.length - 1] = node;
    if (bounds && (bounds.min >= 2 || bounds.max >= 2) && !repeatIsValid(node, MAX_REPEAT)) {
      throw new SyntaxFault(ERR.invalidRepeatSize, before.slice(0, before.length - after.length));
    }
    return after;
  }

  /** `(?...`: flags, a flag group, or a named capture; returns the rest. */
  perlFlags(s: string): string {
    const startsWithP = s.length > 4 && s[2] === "P" && s[3] === "<";
    const startsWithName = s.length > 3 && s[2] === "<";
    if (startsWithP || startsWithName) {
      const end = s.indexOf(">");
      if (end < 0) throw new SyntaxFault(ERR.invalidNamedCapture, s);
      const capture = s.slice(0, end + 1);
      const name = s.slice(startsWithP ? 4 : 3, end);
      if (!/^[A-Za-z0-9_]+$/.test(name)) throw new SyntaxFault(ERR.invalidNamedCapture, capture);
      this.leftParen();
      return s.slice(end + 1);
    }
    let t = s.slice(2);
    let sign = 1;
    let sawFlag = false;
    while (t !== "") {
      const c = firstRune(t);
      t = t.slice(c.length);
      if (c === "i" || c === "m" || c === "s" || c === "U") {
        sawFlag = true;
      } else if (c === "-") {
        if (sign < 0) break;
        sign = -1;
        sawFlag = false;
      } else if (c === ":" || c === ")") {
        if (sign < 0 && !sawFlag) break;
        if (c === ":") this.leftParen();
        return t;
      } else {
        break;
      }
    }
    throw new SyntaxFault(ERR.invalidPerlOp, s.slice(0, s.length - t.length));
  }

  /** An escape `\...` read as one rune (Go's parseEscape); returns the code point and rest. */
  escape(s: string): [number, string] {
    let t = s.slice(1);
    if (t === "") throw new SyntaxFault(ERR.trailingBackslash, "");
    const c = firstRune(t);
    t = t.slice(c.length);
    const fail = () => new SyntaxFault(ERR.invalidEscape, s.slice(0, s.length - t.length));
    if (c >= "1" && c <= "7" && !(t !== "" && t[0]! >= "0" && t[0]! <= "7")) throw fail();
    if (c >= "0" && c <= "7") {
      let r = c.charCodeAt(0) - 48;
      for (let i = 1; i < 3 && t !== "" && t[0]! >= "0" && t[0]! <= "7"; i++) {
        r = r * 8 + t.charCodeAt(0) - 48;
        t = t.slice(1);
      }
      return [r, t];
    }
    if (c === "x") {
      if (t === "") throw fail();
      let d = firstRune(t);
      t = t.slice(d.length);
      if (d === "{") {
        let r = 0;
        let digits = 0;
        for (;;) {
          if (t === "") throw fail();
          d = firstRune(t);
          t = t.slice(d.length);
          if (d === "}") break;
          const v = unhex(d);
          if (v < 0) throw fail();
          r = r * 16 + v;
          if (r > MAX_RUNE) throw fail();
          digits++;
        }
        if (digits === 0) throw fail();
        return [r, t];
      }
      const x = unhex(d);
      if (t === "") throw fail();
      d = firstRune(t);
      t = t.slice(d.length);
      const y = unhex(d);
      if (x < 0 || y < 0) throw fail();
      return [x * 16 + y, t];
    }
    const simple: Record<string, number> = { a: 7, f: 12, n: 10, r: 13, t: 9, v: 11 };
    if (simple[c] !== undefined) return [simple[c]!, t];
    if (c.codePointAt(0)! < 0x80 && !isAlnum(c)) return [c.codePointAt(0)!, t];
    throw fail();
  }

  /** `\pX`, `\p{Name}`, `\PX`, `\P{^Name}`: the rest after it, or undefined if `s` is not one. */
  unicodeClass(s: string): string | undefined {
    if (s.length < 2 || s[0] !== "\\" || (s[1] !== "p" && s[1] !== "P")) return undefined;
    let t = s.slice(2);
    const c = t === "" ? "" : firstRune(t);
    t = t.slice(c.length);
    let seq: string;
    let name: string;
    if (c !== "{") {
      seq = s.slice(0, s.length - t.length);
      name = seq.slice(2);
    } else {
      const end = s.indexOf("}");
      if (end < 0) throw new SyntaxFault(ERR.invalidCharRange, s);
      seq = s.slice(0, end + 1);
      t = s.slice(end + 1);
      name = s.slice(3, end);
    }
    if (name.startsWith("^")) name = name.slice(1);
    if (!UNICODE_CLASSES.has(canonicalName(name))) {
      throw new SyntaxFault(ERR.invalidCharRange, seq);
    }
    return t;
  }

  /** `[...]` (Go's parseClass, Perl flags); returns the rest after `]`. */
  charClass(s: string): string {
    let t = s.slice(1);
    if (t.startsWith("^")) t = t.slice(1);
    let first = true;
    const classChar = (u: string): [number, string] => {
      if (u === "") throw new SyntaxFault(ERR.missingBracket, s);
      if (u[0] === "\\") return this.escape(u);
      const r = firstRune(u);
      return [r.codePointAt(0)!, u.slice(r.length)];
    };
    while (t === "" || t[0] !== "]" || first) {
      first = false;
      if (t.length > 2 && t[0] === "[" && t[1] === ":") {
        const i = t.indexOf(":]", 2);
        if (i >= 0) {
          const name = t.slice(0, i + 2);
          if (!POSIX_CLASSES.has(name)) throw new SyntaxFault(ERR.invalidCharRange, name);
          t = t.slice(i + 2);
          continue;
        }
      }
      const afterUnicode = this.unicodeClass(t);
      if (afterUnicode !== undefined) {
        t = afterUnicode;
        continue;
      }
      if (t.length >= 2 && t[0] === "\\" && /[dswDSW]/.test(t[1]!)) {
        t = t.slice(2);
        continue;
      }
      const range = t;
      let lo: number;
      [lo, t] = classChar(t);
      if (t.length >= 2 && t[0] === "-" && t[1] !== "]") {
        let hi: number;
        [hi, t] = classChar(t.slice(1));
        if (hi < lo) {
          throw new SyntaxFault(ERR.invalidCharRange, range.slice(0, range.length - t.length));
        }
      }
    }
    return t.slice(1);
  }

  parse(): void {
    let t = this.whole;
    let lastRepeat = "";
    while (t !== "") {
      let repeat = "";
      const c = t[0]!;
      if (c === "(") {
        if (t.length >= 2 && t[1] === "?") {
          t = this.perlFlags(t);
        } else {
          this.leftParen();
          t = t.slice(1);
        }
      } else if (c === "|") {
        this.collapse();
        this.push({ kind: "bar", subs: [] });
        t = t.slice(1);
      } else if (c === ")") {
        this.rightParen();
        t = t.slice(1);
      } else if (c === "[") {
        t = this.charClass(t);
        this.push({ kind: "expr", subs: [] });
      } else if (c === "*" || c === "+" || c === "?") {
        const before = t;
        t = this.repeat(undefined, undefined, before, t.slice(1), lastRepeat);
        repeat = before;
      } else if (c === "{") {
        const before = t;
        const m = /^\{(0|[1-9]\d*)(?:(,)(0|[1-9]\d*)?)?\}/.exec(t);
        if (!m) {
          this.push({ kind: "expr", subs: [] });
          t = t.slice(1);
        } else {
          const num = (d: string) => (d.length > 9 || Number(d) >= 1e9 ? -1 : Number(d));
          let min = num(m[1]!);
          const max = m[2] === undefined ? min : m[3] === undefined ? -1 : num(m[3]);
          if (m[3] !== undefined && max < 0) min = -1;
          const after = t.slice(m[0].length);
          if (min < 0 || min > MAX_REPEAT || max > MAX_REPEAT || (max >= 0 && min > max)) {
            throw new SyntaxFault(ERR.invalidRepeatSize, m[0]);
          }
          t = this.repeat(max === -1 ? min : max, { min, max }, before, after, lastRepeat);
          repeat = before;
        }
      } else if (c === "\\") {
        const d = t[1];
        if (d === "A" || d === "b" || d === "B" || d === "z") {
          t = t.slice(2);
        } else if (d === "C") {
          throw new SyntaxFault(ERR.invalidEscape, t.slice(0, 2));
        } else if (d === "Q") {
          const end = t.indexOf("\\E", 2);
          const literal = end < 0 ? t.slice(2) : t.slice(2, end);
          t = end < 0 ? "" : t.slice(end + 2);
          // An empty \Q\E adds nothing a repetition could apply to.
          if (literal === "") {
            lastRepeat = repeat;
            continue;
          }
        } else {
          const afterUnicode = this.unicodeClass(t);
          if (afterUnicode !== undefined) t = afterUnicode;
          else if (d !== undefined && /[dswDSW]/.test(d)) t = t.slice(2);
          else t = this.escape(t)[1];
        }
        this.push({ kind: "expr", subs: [] });
      } else {
        // A literal, or ^ $ . (operators a repetition may follow).
        this.push({ kind: "expr", subs: [] });
        t = t.slice(firstRune(t).length);
      }
      lastRepeat = repeat;
    }
    this.collapse();
    if (this.stack.length !== 1) throw new SyntaxFault(ERR.missingParen, this.whole);
  }
}

/**
 * Go's `syntax.Parse(pattern, syntax.Perl)` error text for `pattern`, or undefined when it
 * parses: `error parsing regexp: <code>: ` + "`<fragment>`".
 */
export function goRegexpSyntaxError(pattern: string): string | undefined {
  try {
    new Parser(pattern).parse();
    return undefined;
  } catch (e) {
    if (!(e instanceof SyntaxFault)) throw e;
    return `error parsing regexp: ${e.code}: \`${e.expr}\``;
  }
}
