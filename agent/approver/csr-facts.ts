/**
 * The approver's view of CertificateSigningRequest objects: pure helpers
 * over what the API returned.
 */
import type { CertificateSigningRequest } from '../kube/csr-state.js';
import type { CsrFacts } from './rules/rule.js';
import type { RequestFacts } from './request.js';

/**
 * The fields kube-controller-manager's approver also reads (the requester's
 * uid and extra), and what retain.ts kept of a spec.request too large to keep.
 */
export type ApproverCsr = CertificateSigningRequest & {
  spec: CertificateSigningRequest['spec'] & { uid?: string; extra?: Record<string, string[]> };
  /** Set when spec.request (then '') was over MAX_REQUEST_BYTES: its size and CN, never sent back to the API. */
  oversizedRequest?: { bytes: number; commonName: string | null };
  /** Set when retain.ts dropped labels, annotations or the like: the /approval write sends the stored metadata back (api.ts). */
  metadataDropped?: boolean;
  /** Set by retain.ts on a pending CSR no enabled policy decides: never decided, and it takes no requester's share (cache.ts). */
  notOurs?: boolean;
};

export function hasCondition(csr: ApproverCsr, ...types: string[]): boolean {
  return (csr.status?.conditions ?? []).some((c) => types.includes(c.type));
}

/** matches sarapprove.go: a CSR with a certificate, or already approved or denied, is never decided again. */
export function isSettled(csr: ApproverCsr): boolean {
  return Boolean(csr.status?.certificate) || hasCondition(csr, 'Approved', 'Denied', 'Failed');
}

/** Still on its way to a certificate: no certificate yet and not denied or failed (approved or not). */
export function isUnissued(csr: ApproverCsr): boolean {
  return !csr.status?.certificate && !hasCondition(csr, 'Denied', 'Failed');
}

/** Creation order, with the name breaking ties inside one second (creationTimestamp has no fraction). */
export function isOlder(a: ApproverCsr, b: ApproverCsr): boolean {
  const ta = Date.parse(a.metadata.creationTimestamp ?? '');
  const tb = Date.parse(b.metadata.creationTimestamp ?? '');
  return ta !== tb ? ta < tb : a.metadata.name < b.metadata.name;
}

/**
 * Whether `other`, of the same requester and signer, must be issued (or
 * denied) before `csr` may be approved: when it is approved and unissued,
 * whatever its age or name (so at most one approval is ever outstanding, in
 * whatever order the CSRs arrive), or when it is pending and older (so a
 * flood is taken oldest first and two pending CSRs never wait on each other).
 */
export function blocks(other: ApproverCsr, csr: ApproverCsr): boolean {
  if (
    other.metadata.name === csr.metadata.name ||
    other.spec.username !== csr.spec.username ||
    other.spec.signerName !== csr.spec.signerName
  )
    return false;
  if (!isUnissued(other)) return false;
  return hasCondition(other, 'Approved') || isOlder(other, csr);
}

/** `request` is the parsed spec.request, or why it could not be read. */
export function csrFacts(csr: ApproverCsr, request: RequestFacts | string): CsrFacts {
  return {
    name: csr.metadata.name,
    uid: csr.metadata.uid ?? '',
    created: csr.metadata.creationTimestamp,
    signerName: csr.spec.signerName,
    username: csr.spec.username ?? '',
    groups: csr.spec.groups ?? [],
    usages: csr.spec.usages ?? [],
    expirationSeconds: csr.spec.expirationSeconds,
    request: typeof request === 'string' ? null : request,
    requestProblem: typeof request === 'string' ? request : null,
  };
}
