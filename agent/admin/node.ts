/**
 * The admin's view of node identities (`kubeboot node`), decided from what
 * the API returned: which pending CSRs a revocation denies, who renews a
 * node's kubelet client certificate, what `node list` shows (its TPM
 * enrolment among it). Pure; the requests are agent/admin/node-requests.ts's.
 */
import type { CertificateSigningRequest, CsrCondition } from '../kube/csr-state.js';
import { csrState } from '../kube/csr-state.js';
import type { Replacement, Revocation } from '../records/bindings.js';
import { parseInventoryEntry } from '../records/inventory.js';
import type { TpmEnrolmentObject } from '../records/kinds.js';
import { enrolmentOf, enrolmentRef } from '../records/tpm-enrolment.js';
import { columns, terminalLines } from '../text.js';
import { rfc3339 } from './token.js';

export const NODE_USER = 'system:node:';
/** The reason of the Denied condition `kubeboot node revoke` adds. */
export const REVOKED_REASON = 'KubebootRevoked';

/**
 * Who renews a node's kubelet client certificate, read from the CSR that
 * issued its newest one. matches kubelet: its bootstrap names the CSR
 * `node-csr-<digest>` (digestedName) and its certificate manager renews under
 * generateName `csr-`; kubeboot names first issue and renewal alike
 * `node-csr-<digest>` (pki/csr-name.ts). So a `csr-` CSR of the node is the
 * kubelet renewing, a `node-csr-` one is kubeboot, and one from a bootstrap
 * token is the first issue (kubeboot's or the kubelet's): no renewal seen yet.
 */
export type Renewer = 'kubeboot' | 'kubelet' | 'not yet' | 'unknown';

export function renewerOf(csrName: string, requester: string, node: string): Renewer {
  if (requester.startsWith('system:bootstrap:')) return 'not yet';
  if (requester !== NODE_USER + node) return 'unknown';
  if (csrName.startsWith('csr-')) return 'kubelet';
  return csrName.startsWith('node-csr-') ? 'kubeboot' : 'unknown';
}

/** A kubelet client certificate a CSR still shows, with the CSR that issued it. */
export interface IssuedCert {
  node: string;
  notBefore: Date;
  notAfter: Date;
  csr: string;
  requester: string;
}

export interface NodeRow {
  name: string;
  identity: string;
  /** A Node object of that name exists. */
  registered: boolean;
  /** notAfter (RFC 3339) of the newest kubelet client certificate a CSR still shows; null: unknown (decided CSRs are deleted after an hour). */
  certificateExpires: string | null;
  /** The CSR showing it. */
  csr: string | null;
  renewedBy: Renewer;
  revoked: Revocation | null;
  replacement: Replacement | null;
  /** Its TPM in the inventory (`kubeboot node enroll`): `tpm-ak <name>` (or enrolled from its tpm-ek), `tpm-ek only (AK not enrolled yet …)`, `none`, or why the entry cannot be read. */
  attestation: string;
}

/**
 * What the inventory says of a name's TPM, for `node list`; for a name
 * enrolled by its EK alone, what its TpmEnrolment says (records/tpm-enrolment.ts).
 */
export function attestationOf(
  nodes: Readonly<Record<string, string>> | null,
  name: string,
  enrolments: ReadonlyMap<string, TpmEnrolmentObject> = new Map(),
): string {
  const raw = nodes !== null && Object.hasOwn(nodes, name) ? nodes[name] : undefined;
  if (raw === undefined) return 'none';
  const entry = parseInventoryEntry(name, raw);
  if ('problem' in entry) return 'inventory entry broken';
  if (entry.tpmAk !== undefined) return `tpm-ak ${entry.tpmAk.slice(0, 16)}…`;
  if (entry.tpmEk === undefined) return 'none';
  const object = enrolments.get(name);
  const enrolled = object === undefined ? null : enrolmentOf(object, entry.tpmEk);
  if (enrolled !== null && 'problem' in enrolled) return `tpm-ek, enrolment broken (${enrolmentRef(name)})`;
  if (enrolled?.akName != null) return `tpm-ak ${enrolled.akName.slice(0, 16)}… (enrolled from tpm-ek)`;
  return 'tpm-ek only (AK not enrolled yet: challenged at its first join)';
}

/** The newest certificate (by notBefore) of each node. */
export function newestCerts(certs: readonly IssuedCert[]): Map<string, IssuedCert> {
  const newest = new Map<string, IssuedCert>();
  for (const c of certs) {
    const seen = newest.get(c.node);
    if (seen === undefined || c.notBefore > seen.notBefore) newest.set(c.node, c);
  }
  return newest;
}

/** Each Node, and each revoked or marked name without one, with its newest certificate a CSR shows. */
export function nodeRows(
  nodes: readonly string[],
  certs: readonly IssuedCert[],
  revocations: ReadonlyMap<string, Revocation>,
  replacements: ReadonlyMap<string, Replacement>,
  inventory: Readonly<Record<string, string>> | null = null,
  enrolments: ReadonlyMap<string, TpmEnrolmentObject> = new Map(),
): NodeRow[] {
  const newest = newestCerts(certs);
  const registered = new Set(nodes);
  const enrolled = Object.keys(inventory ?? {}).filter((name) => attestationOf(inventory, name) !== 'none');
  const names = [...new Set([...nodes, ...revocations.keys(), ...replacements.keys(), ...enrolled])].sort();
  return names.map((name) => {
    const cert = newest.get(name);
    return {
      name,
      identity: NODE_USER + name,
      registered: registered.has(name),
      certificateExpires: cert ? rfc3339(cert.notAfter) : null,
      csr: cert?.csr ?? null,
      renewedBy: cert ? renewerOf(cert.csr, cert.requester, name) : 'unknown',
      revoked: revocations.get(name) ?? null,
      replacement: replacements.get(name) ?? null,
      attestation: attestationOf(inventory, name, enrolments),
    };
  });
}

/** Every cell but the header is the cluster's text (a Node's name, a revocation's reason): columns() bounds and escapes it. */
export function renderNodeTable(rows: readonly NodeRow[]): string {
  const table = [['NAME', 'NODE', 'IDENTITY', 'CERTIFICATE EXPIRES', 'RENEWED BY', 'REVOKED', 'REPLACEMENT', 'TPM']];
  for (const r of rows) {
    const revoked = r.revoked === null ? 'no' : `since ${r.revoked.at || '?'}${r.revoked.reason ? `: ${r.revoked.reason}` : ''}`;
    const replacement =
      r.replacement === null
        ? ''
        : r.replacement.claimedBy === null
          ? `marked ${r.replacement.at}`
          : `claimed by CSR ${r.replacement.claimedBy}`;
    table.push([
      r.name,
      r.registered ? 'yes' : 'no',
      r.identity,
      r.certificateExpires ?? 'unknown',
      r.renewedBy,
      revoked,
      replacement,
      r.attestation,
    ]);
  }
  return terminalLines(columns(table));
}

/**
 * What a revocation does to one CSR, of any signer: `deny` a pending CSR
 * requested by the node (its kubelet client renewal, its kube-proxy and
 * serving CSRs) or naming it (CN `system:node:<node>`, whoever asks: a
 * bootstrap token too), `approved` for one already approved (Denied cannot
 * be added then; its certificate lives to its notAfter), null for others.
 */
export function revocationAction(csr: CertificateSigningRequest, commonName: string | null, node: string): 'deny' | 'approved' | null {
  if (csr.spec.username !== NODE_USER + node && commonName !== NODE_USER + node) return null;
  const state = csrState(csr);
  if (state.state !== 'pending') return null;
  return state.approved ? 'approved' : 'deny';
}

export function revokedCondition(node: string, reason: string, now: Date): CsrCondition & { lastUpdateTime: string } {
  return {
    type: 'Denied',
    status: 'True',
    reason: REVOKED_REASON,
    message: `node ${node} is revoked (kubeboot node revoke)${reason ? `: ${reason}` : ''}`,
    lastUpdateTime: rfc3339(now),
  };
}
