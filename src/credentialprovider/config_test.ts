import assert from "node:assert/strict";
import { join } from "node:path";
import {
  type CredentialProvider,
  decodeCredentialProviderConfig,
  readCredentialProviderConfig,
  type ServiceAccountTokenAttributes,
  validateCredentialProviderConfig,
} from "./config.ts";

const V1 = "credentialprovider.kubelet.k8s.io/v1";
const V1ALPHA1 = "credentialprovider.kubelet.k8s.io/v1alpha1";

function provider(p: Partial<CredentialProvider> = {}): CredentialProvider {
  return {
    name: "foobar",
    matchImages: ["foobar.registry.io"],
    defaultCacheDuration: 60_000,
    apiVersion: V1ALPHA1,
    args: [],
    env: [],
    ...p,
  };
}

function tokenAttributes(t: Partial<ServiceAccountTokenAttributes> = {}) {
  return {
    serviceAccountTokenAudience: "audience",
    cacheType: "ServiceAccount",
    requireServiceAccount: true,
    requiredServiceAccountAnnotationKeys: [],
    optionalServiceAccountAnnotationKeys: [],
    ...t,
  };
}

const validate = (providers: CredentialProvider[], gate = true) =>
  validateCredentialProviderConfig({ providers }, gate);

// Upstream config_test.go Test_validateCredentialProviderConfig, re-expressed.
Deno.test("validateCredentialProviderConfig reports upstream's errors", () => {
  const cases: [string, CredentialProvider[], string[], boolean?][] = [
    ["no providers", [], ["providers: Required value: at least 1 item in plugins is required"]],
    [
      "no matchImages",
      [provider({ matchImages: [] })],
      ["providers.matchImages: Required value: at least 1 item in matchImages is required"],
    ],
    [
      "no defaultCacheDuration",
      [provider({ defaultCacheDuration: undefined })],
      ["providers.defaultCacheDuration: Required value"],
    ],
    [
      "name with '/'",
      [provider({ name: "foo/../bar" })],
      [`providers.name: Invalid value: "foo/../bar": provider name cannot contain '/'`],
    ],
    ["name '.'", [provider({ name: "." })], [
      `providers.name: Invalid value: ".": provider name cannot be '.'`,
    ]],
    ["name '..'", [provider({ name: ".." })], [
      `providers.name: Invalid value: "..": provider name cannot be '..'`,
    ]],
    ["name with a space", [provider({ name: "foo bar" })], [
      `providers.name: Invalid value: "foo bar": provider name cannot contain spaces`,
    ]],
    ["duplicate names", [provider(), provider()], [`providers.name: Duplicate value: "foobar"`]],
    ["no apiVersion", [provider({ apiVersion: "" })], ["providers.apiVersion: Required value"]],
    [
      "unknown apiVersion",
      [provider({ apiVersion: "credentialprovider.kubelet.k8s.io/v1alpha0" })],
      [
        `providers.apiVersion: Unsupported value: "credentialprovider.kubelet.k8s.io/v1alpha0": ` +
        `supported values: "credentialprovider.kubelet.k8s.io/v1", ` +
        `"credentialprovider.kubelet.k8s.io/v1alpha1", "credentialprovider.kubelet.k8s.io/v1beta1"`,
      ],
    ],
    [
      "negative defaultCacheDuration",
      [provider({ defaultCacheDuration: -60_000 })],
      [`providers.defaultCacheDuration: Invalid value: "-1m0s": must be greater than or equal to 0`],
    ],
    [
      "invalid match image",
      [provider({ matchImages: ["%invalid%"] })],
      [
        `providers.matchImages: Invalid value: "%invalid%": match image is invalid: ` +
        `parse "https://%invalid%": invalid URL escape "%in"`,
      ],
    ],
    ["valid", [provider()], []],
    [
      "tokenAttributes with the gate off",
      [provider({ apiVersion: V1, tokenAttributes: tokenAttributes() })],
      [
        "providers.tokenAttributes: Forbidden: tokenAttributes is not supported when " +
        "KubeletServiceAccountTokenForCredentialProviders feature gate is disabled",
      ],
      false,
    ],
    [
      "no audience",
      [provider({
        apiVersion: V1,
        tokenAttributes: tokenAttributes({ serviceAccountTokenAudience: "" }),
      })],
      ["providers.tokenAttributes.serviceAccountTokenAudience: Required value"],
    ],
    [
      "no requireServiceAccount",
      [provider({
        apiVersion: V1,
        tokenAttributes: tokenAttributes({ requireServiceAccount: undefined }),
      })],
      ["providers.tokenAttributes.requireServiceAccount: Required value"],
    ],
    [
      "no cacheType",
      [provider({ apiVersion: V1, tokenAttributes: tokenAttributes({ cacheType: "" }) })],
      [
        "providers.tokenAttributes.cacheType: Required value: cacheType is required to be set " +
        "when tokenAttributes is specified. Supported values are: ServiceAccount, Token",
      ],
    ],
    [
      "unknown cacheType",
      [provider({
        apiVersion: V1,
        tokenAttributes: tokenAttributes({ cacheType: "invalid-cache-type" }),
      })],
      [
        `providers.tokenAttributes.cacheType: Unsupported value: "invalid-cache-type": ` +
        `supported values: "ServiceAccount", "Token"`,
      ],
    ],
    [
      "invalid required annotation key",
      [provider({
        apiVersion: V1,
        tokenAttributes: tokenAttributes({
          requiredServiceAccountAnnotationKeys: ["cantendwithadash-", "now-with-dashes/simple"],
        }),
      })],
      [
        `providers.tokenAttributes.requiredServiceAccountAnnotationKeys: Invalid value: ` +
        `"cantendwithadash-": name part must consist of alphanumeric characters, '-', '_' or ` +
        `'.', and must start and end with an alphanumeric character (e.g. 'MyName',  or ` +
        `'my.name',  or '123-abc', regex used for validation is ` +
        `'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`,
      ],
    ],
    [
      "duplicate optional annotation keys",
      [provider({
        apiVersion: V1,
        tokenAttributes: tokenAttributes({
          optionalServiceAccountAnnotationKeys: [
            "now-with-dashes/simple",
            "now-with-dashes/simple",
          ],
        }),
      })],
      [
        `providers.tokenAttributes.optionalServiceAccountAnnotationKeys: Duplicate value: ` +
        `"now-with-dashes/simple"`,
      ],
    ],
    [
      "a key both required and optional",
      [provider({
        apiVersion: V1,
        tokenAttributes: tokenAttributes({
          requiredServiceAccountAnnotationKeys: [
            "now-with-dashes/simple-1",
            "now-with-dashes/simple-2",
          ],
          optionalServiceAccountAnnotationKeys: ["now-with-dashes/simple-2"],
        }),
      })],
      [
        `providers.tokenAttributes: Invalid value: ["now-with-dashes/simple-2"]: annotation keys ` +
        `cannot be both required and optional`,
      ],
    ],
    [
      "required keys without requireServiceAccount",
      [provider({
        apiVersion: V1,
        tokenAttributes: tokenAttributes({
          requireServiceAccount: false,
          requiredServiceAccountAnnotationKeys: ["now-with-dashes/simple"],
        }),
      })],
      [
        "providers.tokenAttributes.requiredServiceAccountAnnotationKeys: Forbidden: " +
        "requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set",
      ],
    ],
    [
      "tokenAttributes with v1alpha1",
      [provider({ apiVersion: V1ALPHA1, tokenAttributes: tokenAttributes() })],
      [
        "providers.tokenAttributes: Forbidden: tokenAttributes is only supported for " +
        "credentialprovider.kubelet.k8s.io/v1 API version",
      ],
    ],
    ["valid with tokenAttributes", [
      provider({ apiVersion: V1, tokenAttributes: tokenAttributes() }),
    ], []],
  ];
  for (const [name, providers, want, gate] of cases) {
    assert.deepEqual(validate(providers, gate ?? true), want, name);
  }
});

const YAML_V1 = `apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: test
    matchImages:
    - "registry.io/one"
    - "*.registry.io"
    defaultCacheDuration: 10m
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    args:
    - --v=5
    env:
    - name: FOO
      value: BAR
    tokenAttributes:
      serviceAccountTokenAudience: my-audience
      cacheType: Token
      requireServiceAccount: true
      optionalServiceAccountAnnotationKeys: ["example.com/role"]
`;

Deno.test("decodeCredentialProviderConfig reads v1 YAML and JSON, and v1beta1/v1alpha1", () => {
  const c = decodeCredentialProviderConfig(YAML_V1);
  assert.deepEqual(c.providers[0], {
    name: "test",
    matchImages: ["registry.io/one", "*.registry.io"],
    defaultCacheDuration: 600_000,
    apiVersion: V1,
    args: ["--v=5"],
    env: [{ name: "FOO", value: "BAR" }],
    tokenAttributes: {
      serviceAccountTokenAudience: "my-audience",
      cacheType: "Token",
      requireServiceAccount: true,
      requiredServiceAccountAnnotationKeys: [],
      optionalServiceAccountAnnotationKeys: ["example.com/role"],
    },
  });
  const json = JSON.stringify({
    apiVersion: "kubelet.config.k8s.io/v1beta1",
    kind: "CredentialProviderConfig",
    providers: [{ name: "j", matchImages: ["a.io"], defaultCacheDuration: "1m", apiVersion: V1 }],
  });
  assert.equal(decodeCredentialProviderConfig(json).providers[0]?.defaultCacheDuration, 60_000);
  const alpha = YAML_V1.replace("kubelet.config.k8s.io/v1\n", "kubelet.config.k8s.io/v1alpha1\n")
    .replace(/ {4}tokenAttributes:[^]*$/, "");
  assert.equal(decodeCredentialProviderConfig(alpha).providers[0]?.name, "test");
});

// Upstream config_test.go Test_readCredentialProviderConfig's decoding failures.
Deno.test("decodeCredentialProviderConfig fails as upstream's strict decoder", () => {
  const cases: [string, string][] = [
    [
      YAML_V1.replace("kind: CredentialProviderConfig", "kind: WrongKind"),
      `no kind "WrongKind" is registered for version "kubelet.config.k8s.io/v1"`,
    ],
    [
      YAML_V1.replace("apiVersion: kubelet.config.k8s.io/v1\n", "apiVersion: foobar/v1alpha1\n"),
      `no kind "CredentialProviderConfig" is registered for version "foobar/v1alpha1"`,
    ],
    [
      YAML_V1.replace("    args:", "    unknownField: x\n    args:"),
      `strict decoding error: unknown field "providers[0].unknownField"`,
    ],
    [
      YAML_V1.replace("kubelet.config.k8s.io/v1\n", "kubelet.config.k8s.io/v1alpha1\n"),
      `strict decoding error: unknown field "providers[0].tokenAttributes"`,
    ],
    [
      YAML_V1.replace("kubelet.config.k8s.io/v1\n", "kubelet.config.k8s.io/v1beta1\n"),
      `strict decoding error: unknown field "providers[0].tokenAttributes"`,
    ],
    [
      YAML_V1.replace("    args:", "    name: again\n    args:"),
      `strict decoding error: yaml: unmarshal errors:\n  line 10: key "name" already set in map`,
    ],
    [
      YAML_V1.replace("defaultCacheDuration: 10m", "defaultCacheDuration: ten"),
      `time: invalid duration "ten"`,
    ],
    [
      YAML_V1.replace(`    - "registry.io/one"\n    - "*.registry.io"`, `      a: b`),
      "json: cannot unmarshal object into Go struct field CredentialProvider.providers.matchImages " +
      "of type []string",
    ],
    [
      YAML_V1.replace("requireServiceAccount: true", 'requireServiceAccount: "yes"'),
      "json: cannot unmarshal string into Go struct field " +
      "ServiceAccountTokenAttributes.providers.tokenAttributes.requireServiceAccount of type bool",
    ],
    [
      YAML_V1.replace(
        "kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig",
        "kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration",
      ),
      `failed to decode "KubeletConfiguration" (wrong Kind)`,
    ],
  ];
  for (const [text, message] of cases) {
    assert.throws(() => decodeCredentialProviderConfig(text), { message }, message);
  }
});

Deno.test("readCredentialProviderConfig merges a directory's files in order and hashes them", async () => {
  const dir = await Deno.makeTempDir({ prefix: "cp-config-" });
  try {
    const file = (name: string) => YAML_V1.replace("name: test", `name: ${name}`);
    await Deno.writeTextFile(join(dir, "b.yaml"), file("second"));
    await Deno.writeTextFile(join(dir, "a.json"), JSON.stringify(decodeRaw(file("first"))));
    await Deno.writeTextFile(join(dir, "c.txt"), "not a config");
    const { config, hash } = await readCredentialProviderConfig(dir);
    assert.deepEqual(config.providers.map((p) => p.name), ["first", "second"]);
    assert.match(hash, /^sha256:[0-9a-f]{64}$/);
    // The hash is of the contents: rewriting a file with other content changes it.
    await Deno.writeTextFile(join(dir, "b.yaml"), file("third"));
    assert.notEqual((await readCredentialProviderConfig(dir)).hash, hash);

    await Deno.writeTextFile(join(dir, "d.yml"), file("first"));
    await assert.rejects(readCredentialProviderConfig(dir), {
      message: `duplicate provider name "first" found in configuration file(s)`,
    });
    const empty = join(dir, "empty");
    await Deno.mkdir(empty);
    await assert.rejects(readCredentialProviderConfig(empty), {
      message: `no configuration files found in directory "${empty}"`,
    });
    const broken = join(dir, "broken.yaml");
    await Deno.writeTextFile(
      broken,
      file("x").replace("kind: CredentialProviderConfig", "kind: Nope"),
    );
    await assert.rejects(readCredentialProviderConfig(broken), {
      message: `error decoding config "${broken}": no kind "Nope" is registered for version ` +
        `"kubelet.config.k8s.io/v1"`,
    });
    await assert.rejects(readCredentialProviderConfig(join(dir, "missing")), {
      message: `unable to access path "${join(dir, "missing")}": stat ${
        join(dir, "missing")
      }: no such file or directory`,
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

function decodeRaw(yaml: string): unknown {
  // The YAML above written as JSON, for the JSON file of the directory.
  const c = decodeCredentialProviderConfig(yaml);
  return {
    apiVersion: "kubelet.config.k8s.io/v1",
    kind: "CredentialProviderConfig",
    providers: c.providers.map((p) => ({
      name: p.name,
      matchImages: p.matchImages,
      defaultCacheDuration: "10m",
      apiVersion: p.apiVersion,
    })),
  };
}
