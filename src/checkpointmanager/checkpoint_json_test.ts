import assert from "node:assert/strict";
import { goJsonMarshal, GoJsonReader, JsonNumber } from "./checkpoint_json.ts";
import { MalformedCheckpointError } from "./errors.ts";
import { go } from "./go_value.ts";

Deno.test("goJsonMarshal writes as json.Marshal: tags, omitempty, sorted keys, base64, nil", () => {
  const v = go.struct("x.T", [
    { name: "Name", value: go.string("<a&b>"), json: "name" },
    { name: "Empty", value: go.map("map[string]string", []), json: "empty,omitempty" },
    {
      name: "Nodes",
      value: go.map("map[int64]bool", [[go.int64(10), go.bool(true)], [
        go.int64(2),
        go.bool(false),
      ]]),
    },
    { name: "Bytes", value: go.bytes(new Uint8Array([0xfb, 0xff])) },
    { name: "Nil", value: go.strings(null) },
    { name: "Ptr", value: go.pointer("int", null) },
    { name: "Skip", value: go.string("x"), json: "-" },
    { name: "private", value: go.string("x") },
  ]);
  assert.equal(
    goJsonMarshal(v),
    '{"name":"\\u003ca\\u0026b\\u003e","Nodes":{"10":true,"2":false},"Bytes":"+/8=","Nil":null,"Ptr":null}',
  );
});

Deno.test("GoJsonReader keeps integers exact and matches fields as json.Unmarshal does", () => {
  const r = new GoJsonReader("f");
  const v = r.parse('{"checksum":18446744073709551615,"POLICYNAME":"a","policyName":"b"}');
  const f = r.struct(v, "", [["PolicyName", "policyName"], ["Checksum", "checksum"]])!;
  assert.equal(r.int(f.get("Checksum")!, "checksum", { unsigned: true }), 2n ** 64n - 1n);
  assert.equal(f.get("PolicyName"), "b");
  assert.throws(
    () => r.int(new JsonNumber("18446744073709551616"), "checksum", { unsigned: true }),
    (e) =>
      e instanceof MalformedCheckpointError &&
      e.message === "f: checksum: 18446744073709551616 overflows a uint64",
  );
  assert.equal(r.intKey("+7", "k"), 7n);
  assert.equal(r.string(null, "s"), undefined);
  assert.equal(r.map(null, "m"), null);
});
