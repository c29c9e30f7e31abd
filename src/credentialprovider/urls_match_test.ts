import assert from "node:assert/strict";
import { globMatch, parseSchemelessUrl, splitUrl, urlsMatch } from "./urls_match.ts";

// Upstream keyring_test.go TestURLsMatch, re-expressed.
const URLS_MATCH: readonly [glob: string, target: string, match: boolean][] = [
  // No path component.
  ["*.kubernetes.io", "prefix.kubernetes.io", true],
  ["prefix.*.io", "prefix.kubernetes.io", true],
  ["prefix.kubernetes.*", "prefix.kubernetes.io", true],
  ["*-good.kubernetes.io", "prefix-good.kubernetes.io", true],
  // Path components.
  ["*.kubernetes.io/blah", "prefix.kubernetes.io/blah", true],
  ["prefix.*.io/foo", "prefix.kubernetes.io/foo/bar", true],
  // Path components and ports.
  ["*.kubernetes.io:1111/blah", "prefix.kubernetes.io:1111/blah", true],
  ["prefix.*.io:1111/foo", "prefix.kubernetes.io:1111/foo/bar", true],
  // Not as many labels.
  ["*.kubernetes.io", "kubernetes.io", false],
  ["*.*.kubernetes.io", "prefix.kubernetes.io", false],
  ["*.*.kubernetes.io", "kubernetes.io", false],
  ["*kubernetes.io", "a.kubernetes.io", false],
  // As many labels.
  ["*kubernetes.io", "kubernetes.io", true],
  ["*.*.*.kubernetes.io", "a.b.c.kubernetes.io", true],
  // A label differs.
  ["kubernetes.io", "kubernetes.com", false],
  ["k*.io", "quay.io", false],
  // Ports differ.
  ["*.kubernetes.io:1234/blah", "prefix.kubernetes.io:1111/blah", false],
  ["prefix.*.io/foo", "prefix.kubernetes.io:1111/foo/bar", false],
];

Deno.test("urlsMatch follows upstream's URLsMatch table", () => {
  for (const [glob, target, match] of URLS_MATCH) {
    assert.equal(urlsMatch(glob, target), match, `${glob} against ${target}`);
  }
});

// Upstream plugin_test.go's matchImages cases (Test_ProvideWithCoordinates, isImageAllowed).
Deno.test("urlsMatch matches images as matchImages entries do upstream", () => {
  assert.equal(urlsMatch("test.registry.io", "test.registry.io/foo/bar"), true);
  assert.equal(urlsMatch("test.registry.io/foo/bar", "test.registry.io/foo/bar"), true);
  assert.equal(urlsMatch("*.registry.io:8080", "test.registry.io:8080/foo"), true);
  assert.equal(urlsMatch("*.*.registry.io", "foo.bar.registry.io/foo/bar"), true);
  assert.equal(urlsMatch("test.registry.io", "test.registry.io:5000/foo"), false);
  assert.equal(urlsMatch("test.registry.io/foo", "test.registry.io/bar"), false);
  // The path is a string prefix, as upstream's strings.HasPrefix.
  assert.equal(urlsMatch("test.registry.io/foo", "test.registry.io/foobar"), true);
  // An IPv6 registry with a port.
  assert.equal(urlsMatch("[::1]:5000", "[::1]:5000/app"), true);
  assert.equal(urlsMatch("localhost:5000", "localhost:5000/app"), true);
  // A pattern that does not parse matches nothing.
  assert.equal(urlsMatch("%zz", "%zz"), false);
});

Deno.test("globMatch is Go's filepath.Match for one label", () => {
  assert.equal(globMatch("ab?", "abc"), true);
  assert.equal(globMatch("[a-c]x", "bx"), true);
  assert.equal(globMatch("[^a-c]x", "bx"), false);
  assert.equal(globMatch("[^a-c]x", "dx"), true);
  // Go has no "[!...]": '!' is a literal member of the class.
  assert.equal(globMatch("[!a]x", "!x"), true);
  assert.equal(globMatch("\\*", "*"), true);
  assert.equal(globMatch("\\*", "a"), false);
  // Malformed patterns (ErrBadPattern) match nothing.
  assert.equal(globMatch("[a", "a"), false);
  assert.equal(globMatch("a\\", "a"), false);
  assert.equal(globMatch("[]", "]"), false);
});

Deno.test("parseSchemelessUrl fails as Go's url.Parse does", () => {
  assert.deepEqual(parseSchemelessUrl("registry.io:5000/a/b"), {
    host: "registry.io:5000",
    path: "/a/b",
  });
  assert.deepEqual(parseSchemelessUrl("registry.io/a%20b?x#y"), {
    host: "registry.io",
    path: "/a b",
  });
  const cases: [string, string][] = [
    ["%invalid%", `parse "https://%invalid%": invalid URL escape "%in"`],
    ["registry.io:abc", `parse "https://registry.io:abc": invalid port ":abc" after host`],
    ["a:1:2", `parse "https://a:1:2": invalid port ":1:2" after host`],
    ["reg istry.io", `parse "https://reg istry.io": invalid character " " in host name`],
    ["registry.io/%x", `parse "https://registry.io/%x": invalid URL escape "%x"`],
    ["[::1", `parse "https://[::1": missing ']' in host`],
    ["a\tb", `parse "https://a\\tb": net/url: invalid control character in URL`],
  ];
  for (const [input, message] of cases) {
    assert.throws(() => parseSchemelessUrl(input), { name: "UrlParseError", message }, input);
  }
});

Deno.test("splitUrl keeps the port apart from the labels", () => {
  assert.deepEqual(splitUrl("a.b.io:443"), { parts: ["a", "b", "io"], port: "443" });
  assert.deepEqual(splitUrl("a.b.io"), { parts: ["a", "b", "io"], port: "" });
  assert.deepEqual(splitUrl("[::1]:5000"), { parts: ["::1"], port: "5000" });
});
