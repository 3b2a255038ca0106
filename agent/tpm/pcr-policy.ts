/**
 * A pool's boot-state policy, `kubeboot approver --tpm-pcr7 PREFIX=SHA256`
 * (repeatable): the SHA-256 PCR 7 values (the secure-boot state: the
 * secure-boot variables and the keys that verified the boot loader) a
 * TPM-bound name under PREFIX may quote. The longest prefix that matches a
 * name decides for it, so `worker-=A` with `worker-gpu-=B` gives the GPU
 * pool its own; an empty prefix (`=A`) is every TPM-bound name. A name no
 * prefix matches is not checked. Opt-in: the values come from the
 * approvals' reports (docs/tpm.md), not from a guess. Pure.
 */
import { quotedPcr } from './csr-evidence.js';

export interface Pcr7Policy {
  prefix: string;
  /** Lowercase hex, 64 digits each. */
  values: string[];
}

const SHA256_HEX = /^[0-9a-f]{64}$/;

/** Why a `--tpm-pcr7` value is not `PREFIX=SHA256`, or null. */
export function pcr7FlagProblem(value: string): string | null {
  const at = value.lastIndexOf('=');
  if (at < 0) return `want PREFIX=SHA256 (a node-name prefix, = and PCR 7's 64 hex digits), not ${JSON.stringify(value.slice(0, 80))}`;
  const digest = value.slice(at + 1).toLowerCase();
  if (!SHA256_HEX.test(digest))
    return `PCR 7's value after = must be 64 hex digits (SHA-256, as an approval reports it), not ${JSON.stringify(digest.slice(0, 80))}`;
  return null;
}

/** The flag's values (already checked) grouped by prefix. */
export function pcr7Policies(flags: readonly string[]): Pcr7Policy[] {
  const byPrefix = new Map<string, Set<string>>();
  for (const flag of flags) {
    const at = flag.lastIndexOf('=');
    const prefix = flag.slice(0, at);
    const values = byPrefix.get(prefix) ?? new Set<string>();
    values.add(flag.slice(at + 1).toLowerCase());
    byPrefix.set(prefix, values);
  }
  return [...byPrefix].map(([prefix, values]) => ({ prefix, values: [...values] }));
}

/** The policy that decides for `name`: the longest prefix it starts with, or null. */
export function pcr7PolicyFor(name: string, policies: readonly Pcr7Policy[] | undefined): Pcr7Policy | null {
  let found: Pcr7Policy | null = null;
  for (const p of policies ?? []) if (name.startsWith(p.prefix) && (found === null || p.prefix.length > found.prefix.length)) found = p;
  return found;
}

/** Why the quoted PCRs break `policy` for `name`, or null (no policy, or PCR 7 is one it allows). */
export function pcr7Problem(name: string, pcrValues: readonly Buffer[], policy: Pcr7Policy | null): string | null {
  if (policy === null) return null;
  const quoted = quotedPcr(pcrValues, 7)?.toString('hex');
  if (quoted !== undefined && policy.values.includes(quoted)) return null;
  return `node ${name} quoted PCR 7 ${quoted ?? '(none)'}, which --tpm-pcr7 does not allow for names ${JSON.stringify(`${policy.prefix}*`)} (${policy.values.length} value(s) allowed): its secure-boot state is not the pool's`;
}
