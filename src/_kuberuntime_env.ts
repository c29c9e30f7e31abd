/**
 * @module
 * A container's environment and the `$(VAR)` expansion of its env values, command and args,
 * and the error every container-config problem is reported as. Private to
 * `kuberuntime_container.ts`. Corresponds to upstream `third_party/forked/golang/expansion`,
 * `kubecontainer.ExpandContainerCommandAndArgs` and the plain-value part of
 * `makeEnvironmentVariables` (pkg/kubelet/kubelet_pods.go).
 */

import type { V1Container } from "@kubernetes/client-node";

/**
 * The container's config cannot be built; the start step fails with CreateContainerConfigError
 * and this message (upstream `ErrCreateContainerConfig`).
 */
export class CreateContainerConfigError extends Error {
  override name = "CreateContainerConfigError";
}

/** One environment variable, after expansion. */
export interface EnvVar {
  readonly name: string;
  readonly value: string;
}

/** A lookup for `$(NAME)`: the first map holding NAME wins; unknown names stay `$(NAME)`. */
export function mappingFuncFor(
  ...contexts: ReadonlyMap<string, string>[]
): (name: string) => string {
  return (name) => {
    for (const vars of contexts) {
      const v = vars.get(name);
      if (v !== undefined) return v;
    }
    return `$(${name})`;
  };
}

/**
 * Expands `$(VAR)` references as upstream's `expansion.Expand`: `$$` is an escaped `$`, an
 * unclosed `$(` and a `$` before anything else are kept as written.
 */
export function expand(input: string, mapping: (name: string) => string): string {
  let out = "";
  let checkpoint = 0;
  for (let cursor = 0; cursor < input.length; cursor++) {
    if (input[cursor] !== "$" || cursor + 1 >= input.length) continue;
    out += input.slice(checkpoint, cursor);
    const rest = input.slice(cursor + 1);
    const next = rest[0];
    if (next === "$") {
      out += "$";
      cursor += 1;
    } else if (next === "(") {
      const close = rest.indexOf(")", 1);
      if (close < 0) {
        out += "$(";
        cursor += 1;
      } else {
        out += mapping(rest.slice(1, close));
        cursor += close + 1;
      }
    } else {
      out += `$${next}`;
      cursor += 1;
    }
    checkpoint = cursor + 1;
  }
  return out + input.slice(checkpoint);
}

/**
 * The container's environment from its plain `env[].value` entries, each expanded against the
 * variables defined before it; a later entry of the same name replaces the earlier one in place.
 * `valueFrom` and `envFrom` throw {@link CreateContainerConfigError}: they need the API objects
 * (ConfigMaps, Secrets, the downward API) that a later piece provides.
 */
export function makeEnvironmentVariables(container: V1Container): EnvVar[] {
  if ((container.envFrom?.length ?? 0) > 0) {
    throw new CreateContainerConfigError("envFrom is not supported yet");
  }
  const env = new Map<string, string>();
  const mapping = mappingFuncFor(env);
  for (const e of container.env ?? []) {
    if (e.valueFrom !== undefined && !e.value) {
      throw new CreateContainerConfigError(
        `env ${JSON.stringify(e.name)}: valueFrom is not supported yet`,
      );
    }
    env.set(e.name, e.value ? expand(e.value, mapping) : "");
  }
  return [...env].map(([name, value]) => ({ name, value }));
}

/** The container's command and args with `$(VAR)` expanded from `envs`. */
export function expandContainerCommandAndArgs(
  container: V1Container,
  envs: readonly EnvVar[],
): { command: string[]; args: string[] } {
  const mapping = mappingFuncFor(new Map(envs.map((e) => [e.name, e.value])));
  return {
    command: (container.command ?? []).map((c) => expand(c, mapping)),
    args: (container.args ?? []).map((a) => expand(a, mapping)),
  };
}
