/**
 * @module
 * The `$(VAR)` expansion of env values, command and args, and the error every container-config
 * problem is reported as. Private to `kuberuntime_container.ts` (the expansion is shared with
 * `kubelet_env.ts`, which builds the environment, and `prober/prober.ts`). Corresponds to upstream
 * `third_party/forked/golang/expansion` and `kubecontainer.ExpandContainerCommandAndArgs`.
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
