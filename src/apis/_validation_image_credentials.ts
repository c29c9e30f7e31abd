/**
 * @module
 * Validation rules for image pull credential verification (KEP-2535, feature gate
 * KubeletEnsureSecretPulledImages): `imagePullCredentialsVerificationPolicy` must be a known
 * policy, and `preloadedImagesVerificationAllowlist` is only allowed with
 * NeverVerifyAllowlistedImages and must hold image names or "registry/path/*" prefixes, as
 * upstream checks them with the Docker reference grammar. Private to
 * validation.ts.
 */

import type { KubeletConfiguration } from "./config_types.ts";

/** Reports one issue, as validateKubeletConfiguration collects them. */
type Add = (path: string, value: unknown, message: string) => void;

const quote = (values: readonly string[]) => values.map((v) => JSON.stringify(v)).join(", ");

const PULL_CREDENTIAL_POLICIES = [
  "NeverVerify",
  "NeverVerifyPreloadedImages",
  "NeverVerifyAllowlistedImages",
  "AlwaysVerify",
];

/** The verification policy and its allowlist; the gate decides whether either may be set. */
export function checkPullCredentials(cfg: KubeletConfiguration, gateOn: boolean, add: Add) {
  const policy = cfg.imagePullCredentialsVerificationPolicy ?? "";
  const allowlist = cfg.preloadedImagesVerificationAllowlist ?? [];
  if (!gateOn) {
    if (policy !== "") {
      add(
        "imagePullCredentialsVerificationPolicy",
        policy,
        "must not be set unless feature gate KubeletEnsureSecretPulledImages is enabled",
      );
    }
    if (allowlist.length > 0) {
      add(
        "preloadedImagesVerificationAllowlist",
        allowlist,
        "must not be set unless feature gate KubeletEnsureSecretPulledImages is enabled",
      );
    }
    return;
  }
  if (!PULL_CREDENTIAL_POLICIES.includes(policy)) {
    add(
      "imagePullCredentialsVerificationPolicy",
      policy,
      `must be one of: ${quote(PULL_CREDENTIAL_POLICIES)}`,
    );
  }
  if (allowlist.length > 0 && policy !== "NeverVerifyAllowlistedImages") {
    add(
      "preloadedImagesVerificationAllowlist",
      allowlist,
      'can only be set when imagePullCredentialsVerificationPolicy is "NeverVerifyAllowlistedImages"',
    );
    return;
  }
  for (const [i, pattern] of allowlist.entries()) {
    const problem = imagePatternProblem(pattern);
    if (problem) {
      add(
        `preloadedImagesVerificationAllowlist[${i}]`,
        pattern,
        `is not a valid image pattern: ${problem}`,
      );
      return;
    }
  }
}

// Docker reference grammar, enough to tell a repository name from one with a tag or digest.
const DOMAIN_COMPONENT = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
const DOMAIN =
  `(?:${DOMAIN_COMPONENT}(?:\\.${DOMAIN_COMPONENT})*|\\[[0-9a-fA-F:.]+\\])(?::[0-9]+)?`;
const PATH_COMPONENT = "[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*";
const REPOSITORY = new RegExp(`^(?:${DOMAIN}/)?${PATH_COMPONENT}(?:/${PATH_COMPONENT})*$`);

/** Upstream's allowlist pattern rules: a full image name, or a prefix ending in "/*". */
function imagePatternProblem(pattern: string): string | undefined {
  if (pattern !== pattern.trim()) return `leading/trailing spaces are not allowed: ${pattern}`;
  const wildcard = pattern.endsWith("/*");
  const trimmed = wildcard ? pattern.slice(0, -1) : pattern;
  if (trimmed.length === 0) return `the supplied pattern is too short: ${pattern}`;
  if (trimmed.includes("*")) {
    return `not a valid wildcard pattern, only patterns ending with '/*' are allowed: ${pattern}`;
  }
  if (wildcard) return trimmed.length === 1 ? "at least registry hostname is required" : undefined;
  const lastSlash = trimmed.lastIndexOf("/");
  const hasTag = trimmed.includes("@") || trimmed.slice(lastSlash + 1).includes(":");
  const name = trimmed.split("@")[0]?.replace(/:[^/]*$/, "") ?? "";
  if (!REPOSITORY.test(name)) {
    return "failed to parse as an image name: invalid reference format";
  }
  // Upstream compares the pattern with its normalized name, so a name that normalization
  // rewrites (no registry host, docker.io without "library/", index.docker.io) is refused too.
  const [first = "", ...path] = name.split("/");
  const hasDomain = path.length > 0 &&
    (first.includes(".") || first.includes(":") || first === "localhost" ||
      first !== first.toLowerCase());
  const rewritten = !hasDomain || first === "index.docker.io" ||
    (first === "docker.io" && path.length === 1);
  if (hasTag || rewritten) {
    return `neither tag nor digest is accepted in an image reference: ${pattern}`;
  }
  return undefined;
}
