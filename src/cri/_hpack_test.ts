import assert from "node:assert/strict";
import {
  encodeHeaderBlock,
  type HeaderField,
  HpackDecoder,
  HpackError,
  huffmanCode,
  huffmanDecode,
} from "./_hpack.ts";

/** Bytes from the RFC's hex dumps (whitespace ignored). */
function hex(s: string): Uint8Array {
  const digits = s.replace(/\s+/g, "");
  return Uint8Array.from(digits.match(/../g)!.map((b) => parseInt(b, 16)));
}

/** One header block of a series on one connection, with the table it leaves. */
interface Step {
  readonly block: string;
  readonly fields: HeaderField[];
  /** Newest first. */
  readonly table: HeaderField[];
  readonly size: number;
}

function decodeSeries(tableSize: number, steps: Step[]): void {
  const d = new HpackDecoder(tableSize);
  for (const [i, step] of steps.entries()) {
    const { fields, truncated } = d.decode(hex(step.block));
    assert.deepEqual(fields, step.fields, `step ${i}`);
    assert.equal(truncated, false);
    assert.deepEqual(d.dynamicTable.entries, step.table, `table after step ${i}`);
    assert.equal(d.dynamicTable.size, step.size, `table size after step ${i}`);
  }
}

const WWW: HeaderField = [":authority", "www.example.com"];
const NO_CACHE: HeaderField = ["cache-control", "no-cache"];
const CUSTOM: HeaderField = ["custom-key", "custom-value"];
const GET_HTTP: HeaderField[] = [[":method", "GET"], [":scheme", "http"], [":path", "/"]];
const GET_HTTPS: HeaderField[] = [[":method", "GET"], [":scheme", "https"], [
  ":path",
  "/index.html",
]];

/** RFC 7541 C.3 and C.4: the same requests; the blocks differ only in Huffman coding. */
function requests(blocks: [string, string, string]): Step[] {
  return [
    { block: blocks[0], fields: [...GET_HTTP, WWW], table: [WWW], size: 57 },
    {
      block: blocks[1],
      fields: [...GET_HTTP, WWW, NO_CACHE],
      table: [NO_CACHE, WWW],
      size: 110,
    },
    {
      block: blocks[2],
      fields: [...GET_HTTPS, WWW, CUSTOM],
      table: [CUSTOM, NO_CACHE, WWW],
      size: 164,
    },
  ];
}

const S302: HeaderField = [":status", "302"];
const S307: HeaderField = [":status", "307"];
const PRIVATE: HeaderField = ["cache-control", "private"];
const DATE21: HeaderField = ["date", "Mon, 21 Oct 2013 20:13:21 GMT"];
const DATE22: HeaderField = ["date", "Mon, 21 Oct 2013 20:13:22 GMT"];
const LOCATION: HeaderField = ["location", "https://www.example.com"];
const GZIP: HeaderField = ["content-encoding", "gzip"];
const COOKIE: HeaderField = [
  "set-cookie",
  "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
];

/** RFC 7541 C.5 and C.6: responses with a 256-octet table, so entries are evicted. */
function responses(blocks: [string, string, string]): Step[] {
  return [
    {
      block: blocks[0],
      fields: [S302, PRIVATE, DATE21, LOCATION],
      table: [LOCATION, DATE21, PRIVATE, S302],
      size: 222,
    },
    {
      block: blocks[1],
      fields: [S307, PRIVATE, DATE21, LOCATION],
      table: [S307, LOCATION, DATE21, PRIVATE],
      size: 222,
    },
    {
      block: blocks[2],
      fields: [[":status", "200"], PRIVATE, DATE22, LOCATION, GZIP, COOKIE],
      table: [COOKIE, GZIP, DATE22],
      size: 215,
    },
  ];
}

Deno.test("HpackDecoder decodes each field representation (RFC 7541 C.2)", () => {
  const cases: [string, HeaderField[], HeaderField[]][] = [
    [
      "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
      [["custom-key", "custom-header"]],
      [["custom-key", "custom-header"]],
    ],
    ["040c 2f73 616d 706c 652f 7061 7468", [[":path", "/sample/path"]], []],
    ["1008 7061 7373 776f 7264 0673 6563 7265 74", [["password", "secret"]], []],
    ["82", [[":method", "GET"]], []],
  ];
  for (const [block, fields, table] of cases) {
    const d = new HpackDecoder();
    assert.deepEqual(d.decode(hex(block)).fields, fields);
    assert.deepEqual(d.dynamicTable.entries, table);
  }
});

Deno.test("HpackDecoder decodes requests without Huffman coding (RFC 7541 C.3)", () => {
  decodeSeries(
    4096,
    requests([
      "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
      "8286 84be 5808 6e6f 2d63 6163 6865",
      "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
    ]),
  );
});

Deno.test("HpackDecoder decodes requests with Huffman coding (RFC 7541 C.4)", () => {
  decodeSeries(
    4096,
    requests([
      "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
      "8286 84be 5886 a8eb 1064 9cbf",
      "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
    ]),
  );
});

Deno.test("HpackDecoder decodes responses and evicts, without Huffman coding (RFC 7541 C.5)", () => {
  decodeSeries(
    256,
    responses([
      `4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
       2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
       6c65 2e63 6f6d`,
      "4803 3330 37c1 c0bf",
      `88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
       54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
       5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
       3d31`,
    ]),
  );
});

Deno.test("HpackDecoder decodes responses and evicts, with Huffman coding (RFC 7541 C.6)", () => {
  decodeSeries(
    256,
    responses([
      `4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
       2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3`,
      "4883 640e ffc1 c0bf",
      `88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
       77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
       9587 3160 65c0 03ed 4ee5 b106 3d50 07`,
    ]),
  );
});

Deno.test("huffmanCode gives the codes of RFC 7541 Appendix B, a complete prefix code", () => {
  // Spot checks across the table: short, long, and EOS.
  assert.deepEqual(huffmanCode(0x30), [0x0, 5]); // '0'
  assert.deepEqual(huffmanCode(0x61), [0x3, 5]); // 'a'
  assert.deepEqual(huffmanCode(0x20), [0x14, 6]); // ' '
  assert.deepEqual(huffmanCode(0x00), [0x1ff8, 13]);
  assert.deepEqual(huffmanCode(0x0a), [0x3ffffffc, 30]);
  assert.deepEqual(huffmanCode(0xff), [0x3ffffee, 26]);
  assert.deepEqual(huffmanCode(256), [0x3fffffff, 30]);
  let kraft = 0;
  for (let s = 0; s <= 256; s++) kraft += 2 ** -huffmanCode(s)[1];
  assert.equal(kraft, 1);
});

/** Huffman-codes `bytes` with {@link huffmanCode}, padding with ones. */
function huffmanEncode(bytes: number[]): Uint8Array {
  let bits = "";
  for (const b of bytes) {
    const [code, len] = huffmanCode(b);
    bits += code.toString(2).padStart(len, "0");
  }
  bits += "1".repeat((8 - bits.length % 8) % 8);
  return Uint8Array.from(bits.match(/.{8}/g) ?? [], (b) => parseInt(b, 2));
}

Deno.test("huffmanDecode reads every octet back and rejects EOS and bad padding", () => {
  const all = [...Array(256).keys()];
  assert.equal(huffmanDecode(huffmanEncode(all)), String.fromCharCode(...all));
  // EOS inside the string.
  assert.throws(() => huffmanDecode(Uint8Array.of(0xff, 0xff, 0xff, 0xff)), HpackError);
  // Padding of 8 bits and more.
  assert.throws(() => huffmanDecode(Uint8Array.of(0x1f, 0xff)), /padding/); // 'a' + 8 ones
  // Padding that is not all ones: 'a' (00011) then 000.
  assert.throws(() => huffmanDecode(Uint8Array.of(0x18)), /padding/);
  assert.equal(huffmanDecode(Uint8Array.of(0x1f)), "a");
});

Deno.test("HpackDecoder rejects malformed blocks with HpackError", () => {
  const bad: [string, RegExp][] = [
    ["80", /index 0/],
    ["be", /out of range/], // index 62 with an empty dynamic table
    ["ff", /truncated integer/],
    ["ff ff ff ff ff ff 0f", /overflow/],
    ["40 05 61", /truncated string/],
    ["82 3f e1 1f", /after a header field/], // size update after a field
    ["3f e2 1f", /over the limit/], // size update to 4097
    ["04", /truncated string/],
  ];
  for (const [block, why] of bad) {
    assert.throws(() => new HpackDecoder().decode(hex(block)), (e: unknown) => {
      assert.ok(e instanceof HpackError, String(e));
      assert.match(e.message, why, block);
      return true;
    });
  }
});

Deno.test("HpackDecoder applies table size updates and drops fields over the list limit", () => {
  const d = new HpackDecoder();
  d.decode(hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"));
  assert.equal(d.dynamicTable.entries.length, 1);
  // A size update to 0 empties the table; then back to 4096 (two updates at the start).
  const r = d.decode(hex("20 3f e1 1f 82"));
  assert.deepEqual(r.fields, [[":method", "GET"]]);
  assert.equal(d.dynamicTable.size, 0);
  // Three fields of 42, 38 and 54 octets against a limit of 100: the third is dropped, but
  // the table still learns it, as the peer's encoder assumes.
  const big = d.decode(
    hex("82 84 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65"),
    100,
  );
  assert.deepEqual(big.fields, [[":method", "GET"], [":path", "/"]]);
  assert.equal(big.truncated, true);
  assert.deepEqual(d.dynamicTable.entries, [CUSTOM]);
});

Deno.test("encodeHeaderBlock writes literals without indexing that HpackDecoder reads back", () => {
  // C.2.2's block: :path by static name index 4, value raw.
  assert.deepEqual(
    encodeHeaderBlock([[":path", "/sample/path"]]),
    hex("040c 2f73 616d 706c 652f 7061 7468"),
  );
  const fields: HeaderField[] = [
    [":status", "200"],
    ["content-type", "application/grpc"],
    ["grpc-status", "13"],
    ["grpc-message", "x".repeat(300)], // a length past the 7-bit prefix
  ];
  const block = encodeHeaderBlock(fields);
  assert.equal(block[0], 0x88);
  const d = new HpackDecoder();
  assert.deepEqual(d.decode(block).fields, fields);
  assert.equal(d.dynamicTable.entries.length, 0);
  assert.throws(() => encodeHeaderBlock([["grpc-message", "ü€"]]), RangeError);
});
