/**
 * What the approver keeps of a CSR, decided as it arrives (list or watch):
 * what a decision reads, never what a requester chose to send. Anyone who
 * may create CSRs chooses their size; 250 CSRs of 1 MB each for a signer the
 * approver does not handle, kept whole, took it to 697 MiB against its
 * Deployment's 256Mi limit, OOM-killed on every restart.
 *
 * - Another signer's CSR, or one already settled (issued, approved, denied,
 *   failed), is never decided again: it keeps its name, uid,
 *   resourceVersion, age, requester, signer and condition types, that it has
 *   a certificate, and nothing it brought (request, labels, annotations).
 * - A pending CSR for one of the approver's signers is kept as the API server
 *   sent it (the /approval write sends its metadata back; only its
 *   conditions are taken), but for managedFields (a subresource write keeps
 *   the stored ones) and a spec.request over MAX_REQUEST_BYTES: no request
 *   the rules could pass is near that size, so it is kept as its size and CN
 *   (recognition reads the CN) and fails the request-signature rule.
 */
import { csrLayout } from '../pki/der.js';
import { isSettled, type ApproverCsr } from './csr-facts.js';
import { POLICIES, type ApproverPolicy } from './policy.js';
import { unambiguousCsrDer } from './request.js';

/** The largest spec.request (decoded PEM) kept and read: kubelet and kube-proxy requests are 0.4–2 KiB (RSA 4096 the largest). */
export const MAX_REQUEST_BYTES = 64 << 10;
/** The cache's default bound (CsrInformer maxCacheBytes): past it the approver goes not-ready instead of growing. */
export const MAX_CACHE_BYTES = 64 << 20;
/**
 * Counted per cached CSR besides its JSON, for the object headers, the Map
 * entries and the requester index: measured, a stub takes 570 bytes of heap
 * in all (counted 1.3 KiB), a kept kube-proxy CSR 1.7 KiB (counted 1.9 KiB).
 */
export const ENTRY_OVERHEAD_BYTES = 1024;
/** status.certificate of a kept CSR that has one: its bytes are not kept, only that it is there. */
export const CERTIFICATE_NOT_KEPT = '(issued; not kept)';
/** The longest CN kept of a request too large to keep: recognition compares it with kube-proxy's and the `system:node:` prefix. */
const MAX_KEPT_CN = 1024;
const COMMON_NAME = '2.5.4.3';

/** The signers whose CSRs this policy decides. */
export function decidedSigners(policy: ApproverPolicy): Set<string> {
  return new Set(
    Object.values(POLICIES)
      .filter((spec) => spec.enabled(policy))
      .map((spec) => spec.signerName),
  );
}

/** Bytes spec.request decodes to, without decoding it. */
export function requestBytes(csr: ApproverCsr): number {
  return Buffer.byteLength(csr.spec.request ?? '', 'base64');
}

/** The violation a request too large to keep is reported as, under the request-signature rule. */
export function oversizedRequestProblem(bytes: number): string {
  return `spec.request is ${bytes} bytes, more than the ${MAX_REQUEST_BYTES} any certificate request kubeboot approves may take (not read)`;
}

/** What the approver keeps of `csr`; `signers` are the ones it decides (decidedSigners). */
export function retain(csr: ApproverCsr, signers: ReadonlySet<string>): ApproverCsr {
  if (!signers.has(csr.spec.signerName) || isSettled(csr)) return stub(csr);
  const { managedFields: _, ...metadata } = csr.metadata as ApproverCsr['metadata'] & { managedFields?: unknown };
  const bytes = requestBytes(csr);
  if (bytes <= MAX_REQUEST_BYTES) return { ...csr, metadata };
  return { ...csr, metadata, spec: { ...csr.spec, request: '' }, oversizedRequest: { bytes, commonName: commonNameOf(csr.spec.request) } };
}

/** Never decided again: what the cache's index, blocks() and isSettled() read. */
function stub(csr: ApproverCsr): ApproverCsr {
  const { name, uid, resourceVersion, creationTimestamp } = csr.metadata;
  const conditions = (csr.status?.conditions ?? []).map(({ type, status }) => ({ type, status }));
  return {
    kind: 'CertificateSigningRequest',
    metadata: { name, uid, resourceVersion, creationTimestamp },
    spec: { request: '', signerName: csr.spec.signerName, username: csr.spec.username },
    status: { conditions, ...(csr.status?.certificate ? { certificate: CERTIFICATE_NOT_KEPT } : {}) },
  };
}

/** The CN of a request that no parser could read differently, or null (then it is as unrecognisable as today). */
function commonNameOf(requestBase64: string): string | null {
  try {
    const der = unambiguousCsrDer(Buffer.from(requestBase64, 'base64').toString('utf8'));
    const cn = csrLayout(der)
      .subject.flat()
      .find((a) => a.oid === COMMON_NAME);
    return cn === undefined ? null : Buffer.from(cn.content).toString('utf8').slice(0, MAX_KEPT_CN);
  } catch {
    return null;
  }
}

/** What the cache counts for a kept CSR: its JSON and ENTRY_OVERHEAD_BYTES. */
export function retainedBytes(csr: ApproverCsr): number {
  return JSON.stringify(csr).length + ENTRY_OVERHEAD_BYTES;
}
