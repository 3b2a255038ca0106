/**
 * What a decision reads of the records (agent/records/) for the node a CSR
 * is for: the token's binding and the name's claim, a replacement mark, the
 * node's revocation and its inventory entry, through the look-ups; and what
 * approving a bootstrap token's CSR spends of them (the claims sync.ts
 * writes before the approval).
 */
import { KubebootError } from '../errors.js';
import {
  bindingName,
  claimRecord,
  nameClaim,
  parseBinding,
  replacementOf,
  revocationOf,
  type NameTaken,
  type Replacement,
  type TokenBinding,
} from '../records/bindings.js';
import { inventoryEntry, type InventoryLookup } from '../records/inventory.js';
import { INVENTORY_NAME, type RecordObjects, type TokenBindingObject } from '../records/kinds.js';
import { legacyBindingName, legacyEntries, unmigrated } from '../records/legacy.js';
import type { Claim } from './api.js';
import type { Lookups } from './lookups.js';
import { requesterKind, tokenIdOf, type CsrFacts, type NodeRecords } from './rules/rule.js';

/** The records, parsed for the rules, and the objects they came from (for the claims). */
export interface ReadRecords {
  records: NodeRecords;
  tokenId: string | null;
  binding: RecordObjects['tokenbindings'] | null;
  claim: RecordObjects['nodeclaims'] | null;
  mark: RecordObjects['nodereplacements'] | null;
}

/*
 * A binding parsed once per object, not once per CSR: a batch's view
 * (batch.ts) hands every decision the same object until a spend replaces it.
 * A record is never changed in place (a spend makes a new object), so a
 * parse kept for an object stays true of it.
 */
const bindings = new WeakMap<TokenBindingObject, TokenBinding | { problem: string }>();

function parsedBinding(tokenId: string, object: TokenBindingObject): TokenBinding | { problem: string } {
  let parsed = bindings.get(object);
  if (parsed === undefined) bindings.set(object, (parsed = parseBinding(tokenId, object)));
  return parsed;
}

/** The mark frees the name for this CSR: bound to its token, unclaimed or claimed by it, and older than the CSR. */
function markFrees(mark: Replacement | null, tokenId: string, facts: CsrFacts): boolean {
  if (mark === null || mark.tokenId !== tokenId || (mark.claimedBy !== null && mark.claimedBy !== facts.uid)) return false;
  return Date.parse(facts.created ?? '') >= Math.floor(Date.parse(mark.at) / 1000) * 1000;
}

/** The node's revocation: its record, or (fail closed) an entry a legacy ConfigMap still holds, refused as unmigrated. */
async function revocationFor(nodeName: string, lookups: Lookups): Promise<NodeRecords['revocation']> {
  const revocation = await lookups.record('noderevocations', nodeName);
  if (revocation !== null) return revocationOf(revocation);
  const legacy = await lookups.legacy('revocations');
  return legacy !== null && legacyEntries(legacy.data).has(nodeName) ? { at: '', reason: unmigrated('revocations') } : null;
}

/** The informer's records, each only when a rule of this requester reads it. */
export async function readRecords(facts: CsrFacts, nodeName: string, lookups: Lookups): Promise<ReadRecords> {
  const tokenId = tokenIdOf(facts.username);
  // A revoked name is not re-joined by a new token either, until `kubeboot node unrevoke`.
  const revocation = await revocationFor(nodeName, lookups);
  if (requesterKind(facts) !== 'bootstrap' || tokenId === null)
    return { records: { binding: null, replacement: null, revocation }, tokenId: null, binding: null, claim: null, mark: null };
  const binding = await lookups.record('tokenbindings', bindingName(tokenId));
  const claim = await lookups.record('nodeclaims', nodeName);
  const mark = await lookups.record('nodereplacements', nodeName);
  const replacement = mark === null ? null : replacementOf(mark);
  let parsed: NodeRecords['binding'] = null;
  if (binding !== null) {
    parsed = parsedBinding(tokenId, binding);
    const spent = claim === null ? null : nameClaim(claim);
    const taken: NameTaken | null = spent !== null && spent.csrUid !== facts.uid && !markFrees(replacement, tokenId, facts) ? spent : null;
    if (!('problem' in parsed) && taken !== null) parsed = { ...parsed, nameTaken: taken };
  } else if ((await lookups.legacy(legacyBindingName(tokenId))) !== null) {
    parsed = { problem: unmigrated(legacyBindingName(tokenId)) };
  }
  return { records: { binding: parsed, replacement, revocation }, tokenId, binding, claim, mark };
}

function versionOf(object: { kind: string; metadata: { name: string; resourceVersion?: string } }): string {
  const rv = object.metadata.resourceVersion;
  // Without it the write would be unconditional, and two approvers could both spend the last name.
  if (!rv) throw new KubebootError(`${object.kind} ${object.metadata.name} came without a resourceVersion; nothing is spent without one`);
  return rv;
}

/**
 * What approving this CSR spends, unless it is already spent on it (the same
 * CSR decided again after a failed approval write): the name in the token's
 * binding, the name's claim, and the replacement mark bound to the token.
 * In that order: a binding's count is spent before the name, so a lost race
 * for the name costs the pool one of its count, never a name twice.
 */
export function claimsOf(facts: CsrFacts, nodeName: string, read: ReadRecords): Claim[] {
  const claims: Claim[] = [];
  const { binding, replacement } = read.records;
  if (read.binding === null || read.tokenId === null || binding === null || 'problem' in binding) return claims;
  if (binding.issued.get(nodeName) !== facts.uid) {
    const issued = [...binding.issued].map(([node, csrUID]) => ({ node, csrUID }));
    claims.push({
      op: 'status',
      resource: 'tokenbindings',
      name: read.binding.metadata.name,
      resourceVersion: versionOf(read.binding),
      status: { issued: [...issued, { node: nodeName, csrUID: facts.uid }] },
    });
  }
  const object = claimRecord(nodeName, read.tokenId, facts.uid);
  if (read.claim === null) claims.push({ op: 'create', resource: 'nodeclaims', name: nodeName, object });
  else if (read.claim.spec?.csrUID !== facts.uid)
    claims.push({
      op: 'replace',
      resource: 'nodeclaims',
      name: nodeName,
      resourceVersion: versionOf(read.claim),
      object: { ...object, metadata: { ...read.claim.metadata } },
    });
  if (read.mark !== null && replacement !== null && replacement.tokenId === read.tokenId && replacement.claimedBy !== facts.uid)
    claims.push({
      op: 'status',
      resource: 'nodereplacements',
      name: nodeName,
      resourceVersion: versionOf(read.mark),
      status: { claimedBy: facts.uid },
    });
  return claims;
}

/** With --inventory, the node's entry for the kubelet client and serving rules (a legacy ConfigMap is named, never read as one). */
export async function readInventory(nodeName: string, lookups: Lookups): Promise<InventoryLookup> {
  const inventory = await lookups.record('inventories', INVENTORY_NAME);
  if (inventory !== null) return { found: true, entry: inventoryEntry(inventory.spec?.nodes, nodeName) };
  return (await lookups.legacy('inventory')) === null ? { found: false } : { found: false, legacy: unmigrated('inventory') };
}
