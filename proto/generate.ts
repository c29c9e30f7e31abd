/**
 * @module
 * Regenerates the TypeScript bindings of the gRPC APIs the kubelet speaks (`deno task proto`):
 * - `proto/runtime/v1/api.ts` from `api.proto` (the CRI, our transcription of k8s.io/cri-api);
 * - `proto/pluginregistration/v1/api.ts` from `api.proto` (the kubelet plugin registration API,
 *   a copy of k8s.io/kubelet's);
 * - `proto/deviceplugin/v1beta1/api.ts`, `proto/podresources/v1/api.ts`, `proto/dra/v1/api.ts`
 *   and `proto/dra_health/v1alpha1/api.ts` (device plugins, the pod resources API, DRA drivers
 *   and their device health stream; copies of k8s.io/kubelet's);
 * - `proto/csi/v1/csi.ts` from `csi.proto` (the CSI spec, a copy of the spec's Go module), with
 *   `proto/google/protobuf/{timestamp,wrappers}.ts`, the well-known types it uses.
 *
 * protoc (Debian's `protobuf-compiler`, and `libprotobuf-dev` for the well-known types'
 * `.proto` files) drives the `protoc-gen-ts_proto` plugin of npm `ts-proto`, which this script
 * installs at a pinned version, with every transitive dependency pinned too, into the
 * git-ignored `.cache/`. Same inputs give byte-identical files.
 *
 * Upstream generates Go bindings from the same files with `hack/update-codegen.sh protobindings`
 * (the CSI spec module ships its own, made by its Makefile).
 */

const TS_PROTO_VERSION = "2.18.0";

/**
 * The whole dependency tree of ts-proto, pinned, so that a later release of a dependency
 * (ts-poet formats the output) cannot change the generated file.
 */
const PINNED_DEPENDENCIES: Readonly<Record<string, string>> = {
  "@bufbuild/protobuf": "2.17.0",
  "case-anything": "2.1.13",
  "detect-libc": "1.0.3",
  "dprint-node": "1.0.8",
  "ts-poet": "6.12.0",
  "ts-proto-descriptors": "2.1.0",
};

/**
 * ts-proto options for every file (an entry of {@link PROTO_FILES} may add some). Why these:
 * - `outputServices=generic-definitions`: `RuntimeServiceDefinition`, `IdentityDefinition`,
 *   `NodeDefinition`, `RegistrationDefinition`...: plain objects naming each method and its
 *   message codecs, with no gRPC library imported: the kubelet's client (src/cri/connection.ts)
 *   speaks gRPC over fetch, and its own server (src/cri/grpc_server.ts) serves them.
 * - `importSuffix=.ts`, `esModuleInterop=true`: imports Deno resolves.
 * - `forceLong=bigint`: CRI timestamps are int64 nanoseconds, past Number.MAX_SAFE_INTEGER; CSI
 *   sizes are int64 bytes (a `google.protobuf.Int64Value` is `bigint | undefined` too).
 * - `useOptionals=messages`: message fields may be left out; scalars are always present after
 *   decode, as proto3 defines them. A wrapper field (CSI's `ProbeResponse.ready`, a `BoolValue`)
 *   is a message: unset is `undefined`, set to false is `false`, as on the wire.
 * - `useDate=false`: a `google.protobuf.Timestamp` (CSI snapshots' `creation_time`) stays
 *   `{ seconds, nanos }`: a `Date` would drop the nanoseconds. The CRI has none.
 * - `env=both`: `bytes` fields are plain `Uint8Array` (what Deno's APIs use), not node `Buffer`.
 * - `outputJsonMethods=false`: these APIs speak binary protobuf only; this saves about 190 KB
 *   for the CRI alone. `create`/`fromPartial` stay: they fill in proto3 defaults, so requests
 *   can be built from a few fields.
 * - `annotateFilesWithVersion=false`: keeps the protoc version out of the file, so the output
 *   does not depend on which protoc built it; the header below names ts-proto instead.
 */
const TS_PROTO_OPTIONS = [
  "outputServices=generic-definitions",
  "importSuffix=.ts",
  "esModuleInterop=true",
  "forceLong=bigint",
  "useOptionals=messages",
  "useDate=false",
  "env=both",
  "outputJsonMethods=false",
  "annotateFilesWithVersion=false",
];

/** One `.proto` to generate from, relative to `proto/` (protoc's include path). */
interface ProtoFile {
  readonly path: string;
  /** ts-proto options for this file only, after {@link TS_PROTO_OPTIONS}. */
  readonly options: readonly string[];
}

/**
 * The inputs. Each gives its own `.ts` beside it, and the files of the `.proto`s it imports
 * that the output uses (the well-known types under `proto/google/protobuf/`); imports used only
 * for custom options (`descriptor.proto`) give no file.
 */
const PROTO_FILES: readonly ProtoFile[] = [
  { path: "runtime/v1/api.proto", options: [] },
  { path: "pluginregistration/v1/api.proto", options: [] },
  { path: "deviceplugin/v1beta1/api.proto", options: [] },
  { path: "podresources/v1/api.proto", options: [] },
  { path: "podresources/v1alpha1/api.proto", options: [] },
  { path: "dra/v1/api.proto", options: [] },
  { path: "dra_health/v1alpha1/api.proto", options: [] },
  // The spec's comments are its full prose (the .proto beside the output keeps them); without
  // them csi.ts is about 60 KB smaller, and the well-known types' output no longer depends on
  // the comments of the protoc release that ships them.
  { path: "csi/v1/csi.proto", options: ["comments=false"] },
];

/** The first lines of a generated file whose source is `source` (a path under proto/, or not). */
function header(source: string): string {
  return `// deno-fmt-ignore-file
// deno-lint-ignore-file
// Code generated by \`deno task proto\` (proto/generate.ts, ts-proto ${TS_PROTO_VERSION}) from
// ${source}. DO NOT EDIT.
`;
}

/** A step of the generation failed; the message says which and how to fix it. */
export class GenerateError extends Error {
  override name = "GenerateError";
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

const protoDir = import.meta.dirname!;
const repoDir = protoDir.replace(/\/proto$/, "");
const toolDir = `${repoDir}/.cache/ts-proto-${TS_PROTO_VERSION}`;
const plugin = `${toolDir}/node_modules/.bin/protoc-gen-ts_proto`;

async function main(): Promise<void> {
  await requireProtoc();
  await installTsProto();

  const outDir = `${repoDir}/.cache/proto-out`;
  const outputs = new Map<string, string>();
  for (const proto of PROTO_FILES) {
    for (const [name, text] of await generate(proto, outDir)) {
      if (outputs.has(name) && outputs.get(name) !== text) {
        throw new GenerateError(`${name} comes out differently for two of PROTO_FILES`);
      }
      outputs.set(name, text);
    }
  }
  for (const [name, text] of outputs) {
    const target = `${protoDir}/${name}`;
    // Only a new folder (the well-known types' on a first run): the task may write no other.
    const dir = target.slice(0, target.lastIndexOf("/"));
    if (!(await exists(dir))) await Deno.mkdir(dir, { recursive: true });
    await Deno.writeTextFile(target, text);
    console.log(`wrote ${target.slice(repoDir.length + 1)}`);
  }
}

/**
 * Runs protoc on one input; returns the `.ts` files to write, by path under `proto/`, with their
 * headers: the input's own and, transitively, those it imports.
 */
async function generate(proto: ProtoFile, outDir: string): Promise<Map<string, string>> {
  await Deno.remove(outDir, { recursive: true }).catch(() => {});
  await Deno.mkdir(outDir, { recursive: true });
  try {
    await run("protoc", [
      `--plugin=protoc-gen-ts_proto=${plugin}`,
      `--ts_proto_out=${outDir}`,
      `--ts_proto_opt=${[...TS_PROTO_OPTIONS, ...proto.options].join(",")}`,
      `--proto_path=${protoDir}`,
      `${protoDir}/${proto.path}`,
    ], protoDir);
  } catch (err) {
    if (err instanceof GenerateError && /google\/protobuf\/\S+: File not found/.test(err.message)) {
      throw new GenerateError(
        `Cannot generate ${proto.path}: protoc does not find its well-known types ` +
          "(google/protobuf/*.proto); install them with 'apt-get install libprotobuf-dev'",
        { cause: err },
      );
    }
    throw err;
  }

  const files = new Map<string, string>();
  const pending = [proto.path.replace(/\.proto$/, ".ts")];
  for (let name = pending.pop(); name !== undefined; name = pending.pop()) {
    if (files.has(name)) continue;
    const generated = await Deno.readTextFile(`${outDir}/${name}`);
    const source = name.replace(/\.ts$/, ".proto");
    const from = name.startsWith("google/")
      ? `${source}, one of protoc's well-known types`
      : `proto/${source}`;
    files.set(name, header(from) + generated);
    for (const [, spec] of generated.matchAll(/^import .* from "(\.\.?\/[^"]+)";$/gm)) {
      pending.push(new URL(spec!, `file:///${name}`).pathname.slice(1));
    }
  }
  await Deno.remove(outDir, { recursive: true });
  return files;
}

async function requireProtoc(): Promise<void> {
  try {
    await run("protoc", ["--version"], protoDir);
  } catch (err) {
    throw new GenerateError(
      "Cannot generate: 'protoc' is missing or broken; install it with " +
        "'apt-get install protobuf-compiler libprotobuf-dev'",
      { cause: err },
    );
  }
}

/** Installs ts-proto into `.cache/` unless that exact version is there already. */
async function installTsProto(): Promise<void> {
  const manifest = {
    name: "kubelet-ts-protoc-plugins",
    private: true,
    dependencies: { "ts-proto": TS_PROTO_VERSION },
    overrides: PINNED_DEPENDENCIES,
  };
  const manifestText = JSON.stringify(manifest, null, 2) + "\n";
  const manifestFile = `${toolDir}/package.json`;
  if (await readOrUndefined(manifestFile) === manifestText && await isFile(plugin)) return;

  await Deno.mkdir(toolDir, { recursive: true });
  await Deno.writeTextFile(manifestFile, manifestText);
  await run("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error"], toolDir);
  if (!(await isFile(plugin))) {
    throw new GenerateError(`npm installed ts-proto@${TS_PROTO_VERSION} but ${plugin} is missing`);
  }
}

async function run(cmd: string, args: string[], cwd: string): Promise<void> {
  const stdio = { stdin: "null", stdout: "piped", stderr: "piped" } as const;
  let out: Deno.CommandOutput;
  try {
    out = await new Deno.Command(cmd, { args, cwd, ...stdio }).output();
  } catch (err) {
    throw new GenerateError(`Cannot run '${cmd}': ${(err as Error).message}`, { cause: err });
  }
  if (!out.success) {
    const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
    throw new GenerateError(`'${cmd} ${args.join(" ")}' failed with code ${out.code}:\n${text}`);
  }
}

async function readOrUndefined(path: string): Promise<string | undefined> {
  try {
    return await Deno.readTextFile(path);
  } catch {
    return undefined;
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch {
    return false;
  }
}

async function isFile(path: string): Promise<boolean> {
  try {
    return (await Deno.stat(path)).isFile;
  } catch {
    return false;
  }
}

if (import.meta.main) {
  try {
    await main();
  } catch (err) {
    console.error(err instanceof GenerateError ? err.message : err);
    Deno.exit(1);
  }
}
