/**
 * What a bootstrap token may join, which names are spent, which nodes are
 * being replaced or are revoked, read from the records of records/kinds.ts:
 * `kubeboot token create --node/--pool` and `kubeboot node replace|revoke`
 * write them, `kubeboot approver` reads them before it approves a kubelet
 * client CSR. Never a Secret: a token's id is public (its user is
 * `system:bootstrap:<id>`), and reading `kube-system/bootstrap-token-<id>`
 * would need `get secrets` in kube-system, which RBAC cannot narrow to ids
 * not yet known.
 *
 * A name is spent twice over: in its binding's status.issued (counted
 * against maxNodes, written with the resourceVersion read, so two approvers
 * never both spend a pool's last name) and by the NodeClaim of that name
 * (created, so a name is spent once across every binding). The same CSR
 * decided again (an approval write that failed) still passes; another CSR
 * for a spent name never does, from any token, but through a replacement
 * mark bound to its token.
 *
 * Maps keyed by node names are Maps: a name is the cluster's text, and
 * `constructor` must not read as spent.
 *
 * Pure: parsing and rendering. The requests are the callers'.
 */
import {
  newRecord,
  recordRef,
  type NodeClaimObject,
  type NodeReplacementObject,
  type NodeRevocationObject,
  type TokenBindingObject,
} from './kinds.js';

/** The TokenBinding of a token is named by its id. */
export function bindingName(tokenId: string): string {
  return tokenId;
}

/** `tokenbindings.kubeboot.io/<id>`, for messages. */
export function bindingRef(tokenId: string): string {
  return recordRef('tokenbindings', bindingName(tokenId));
}

/** The spend of a name by another token (its NodeClaim), which this token may not take. */
export interface NameTaken {
  tokenId: string;
  csrUid: string;
}

interface BindingBase {
  tokenId: string;
  maxNodes: number;
  /** Node name → uid of the CSR it was spent on. */
  issued: ReadonlyMap<string, string>;
  /** Set by the caller for the name being decided: its NodeClaim by another token, not released by a replacement mark. */
  nameTaken?: NameTaken | null;
}

export type TokenBinding =
  /** Exactly these names (a node-bound token: one name, max 1). */
  | (BindingBase & { kind: 'names'; names: string[] })
  /** Any name starting with `prefix`, at most `maxNodes` of them (an autoscaling group's pool). */
  | (BindingBase & { kind: 'prefix'; prefix: string });

/** The binding a TokenBinding holds, or why it holds none that can be trusted (then nothing is approved from it). */
export function parseBinding(tokenId: string, object: TokenBindingObject): TokenBinding | { problem: string } {
  const spec = object.spec ?? {};
  if (spec.tokenID !== tokenId) return { problem: `spec.tokenID ${JSON.stringify(spec.tokenID ?? null)} is not ${tokenId}` };
  // Set by `kubeboot token create` once the token's Secret exists: a binding without it was never given a token.
  if (typeof spec.tokenSecretUID !== 'string' || spec.tokenSecretUID === '')
    return { problem: 'spec.tokenSecretUID is not set: its token was never made (kubeboot token create writes it)' };
  const max = spec.maxNodes;
  if (typeof max !== 'number' || !Number.isSafeInteger(max) || max < 1)
    return { problem: `spec.maxNodes ${JSON.stringify(max ?? null)} is not a whole number ≥ 1` };
  const issued = new Map<string, string>();
  for (const entry of object.status?.issued ?? []) {
    if (typeof entry?.node !== 'string' || typeof entry.csrUID !== 'string' || issued.has(entry.node))
      return { problem: 'status.issued is not a list of distinct {node, csrUID}' };
    issued.set(entry.node, entry.csrUID);
  }
  const names = (spec.names ?? []).filter((n) => typeof n === 'string' && n !== '');
  const prefix = spec.prefix;
  if (names.length > 0 && prefix !== undefined) return { problem: 'both spec.names and spec.prefix are set' };
  if (names.length > 0) return { kind: 'names', tokenId, names, maxNodes: Math.min(max, names.length), issued };
  if (typeof prefix === 'string' && prefix !== '') return { kind: 'prefix', tokenId, prefix, maxNodes: max, issued };
  return { problem: 'neither spec.names nor spec.prefix is set' };
}

/**
 * Pure: whether `binding` lets its token have `name` for the CSR `csrUid`
 * now, or why not. A name already issued is never issued again, from this
 * binding or another, except to the very CSR it was spent on.
 */
export function bindingAllows(binding: TokenBinding, name: string, csrUid: string): string | null {
  const spent = `token ${binding.tokenId}`;
  const onName = binding.issued.get(name);
  if (onName !== undefined && onName !== csrUid) return `${spent} was already spent on ${name}`;
  const taken = binding.nameTaken;
  if (taken != null && taken.csrUid !== csrUid)
    return `${name} was already spent on token ${taken.tokenId} (${recordRef('nodeclaims', name)}); kubeboot node replace ${name} lets a new machine take it`;
  if (onName !== undefined) return null;
  const count = binding.issued.size;
  if (count >= binding.maxNodes) return `${spent} is spent: it joined ${count} of its ${binding.maxNodes} node(s)`;
  if (binding.kind === 'names') return binding.names.includes(name) ? null : `${spent} joins only ${binding.names.join(', ')}`;
  return name.startsWith(binding.prefix) && name.length > binding.prefix.length ? null : `${spent} joins only names ${binding.prefix}*`;
}

/** The TokenBinding `kubeboot token create --node/--pool` writes for a new token (its Secret's uid added once it exists). */
export function bindingRecord(
  tokenId: string,
  spec: { names: string[] } | { prefix: string; maxNodes: number },
  tokenSecretUid?: string,
): TokenBindingObject {
  const body =
    'names' in spec
      ? { tokenID: tokenId, names: spec.names, maxNodes: spec.names.length }
      : { tokenID: tokenId, prefix: spec.prefix, maxNodes: spec.maxNodes };
  return newRecord('tokenbindings', bindingName(tokenId), {
    spec: { ...body, ...(tokenSecretUid ? { tokenSecretUID: tokenSecretUid } : {}) },
  });
}

/** The NodeClaim the approver creates when it spends `node` on a token's CSR. */
export function claimRecord(node: string, tokenId: string, csrUid: string): NodeClaimObject {
  return newRecord('nodeclaims', node, { spec: { tokenID: tokenId, csrUID: csrUid } });
}

/** A NodeClaim read: who spent the name, or null when it does not say (then the name reads as spent by nobody known: refused). */
export function nameClaim(object: NodeClaimObject): NameTaken {
  return { tokenId: object.spec?.tokenID ?? '', csrUid: object.spec?.csrUID ?? '' };
}

export interface Replacement {
  /** When the admin marked it: the mark's metadata.creationTimestamp (the API server's clock). */
  at: string;
  /** The token whose CSR may claim it ('' until one is bound). */
  tokenId: string;
  /** Uid of the CSR that claimed the mark; null while unclaimed. */
  claimedBy: string | null;
}

export function replacementOf(object: NodeReplacementObject): Replacement {
  const claimed = object.status?.claimedBy;
  return {
    at: object.metadata.creationTimestamp ?? '',
    tokenId: object.spec?.tokenID ?? '',
    claimedBy: typeof claimed === 'string' && claimed !== '' ? claimed : null,
  };
}

export interface Revocation {
  at: string;
  reason: string;
}

export function revocationOf(object: NodeRevocationObject): Revocation {
  return { at: object.metadata.creationTimestamp ?? '', reason: object.spec?.reason ?? '' };
}
