/**
 * What the approver keeps of a CSR, decided as it arrives (list or watch):
 * what a decision reads, never what a requester chose to send. Anyone who
 * may create CSRs chooses their size; 250 CSRs of 1 MB each for a signer the
 * approver does not handle, kept whole, took it to 697 MiB against its
 * Deployment's 256Mi limit, OOM-killed on every restart; 90 of 0.9 MB for a
 * signer it does handle (2,000 labels and a 250 KB annotation each) passed its
 * 64 MiB cache bound and kept it not-ready for the whole fleet.
 *
 * - A CSR that is not ours (no enabled policy would decide it: policy.ts
 *   recognize), or one already settled (issued, approved, denied, failed),
 *   is never decided again: it keeps its name, uid, resourceVersion, age,
 *   requester, signer and condition types, that it has a certificate, and
 *   nothing it brought (request, labels, annotations).
 * - A pending CSR of ours keeps what the rules and the SubjectAccessReview
 *   read (csr-facts.ts csrFacts, api.ts subjectAccessReview): its name,
 *   generateName, uid, resourceVersion, age, spec but for nothing it does not
 *   read, and its conditions. Never its labels, annotations, finalizers,
 *   ownerReferences or managedFields: when it had any, `metadataDropped` says
 *   so, and the /approval write sends back the stored metadata instead
 *   (api.ts decideCsr), since the approval strategy takes metadata from the
 *   body. A spec.request over MAX_REQUEST_BYTES is kept as its size and CN
 *   (recognition reads the CN): no request the rules could pass is near that
 *   size, and it fails the request-signature rule.
 *
 * What is kept of a pending CSR is then bounded per requester (cache.ts).
 */
import { isSettled, type ApproverCsr } from './csr-facts.js';
import { POLICIES, recognize } from './policy.js';
import type { ApproverPolicy } from './rules/rule.js';
import { subjectOnlyFacts, unambiguousCsrLayout } from './request.js';

/** The largest spec.request (decoded PEM) kept and read: kubelet and kube-proxy requests are 0.4–2 KiB (RSA 4096 the largest). */
export const MAX_REQUEST_BYTES = 64 << 10;
/** The cache's default bound (CsrInformer maxCacheBytes): past it the approver goes not-ready instead of growing. */
export const MAX_CACHE_BYTES = 64 << 20;
/**
 * Each requester's share of the cache (CsrInformer maxPendingPerRequester):
 * the bytes its kept pending CSRs may take. A node has a handful pending (its
 * kubelet client, kube-proxy and serving CSRs: under 10 KiB); a pool token
 * files one per joining node, about 2.5 KiB each as counted (RSA 2048: 3.5), so
 * a pool of 1,000 joining at once fits; ten requesters at their share take
 * 40 MiB, under MAX_CACHE_BYTES. In bytes, not CSRs: what a requester may send
 * (a name is not bounded in length) costs it its own share.
 */
export const MAX_PENDING_PER_REQUESTER = 4 << 20;
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

/**
 * Whether an enabled policy would decide `csr` (policy.ts recognize), read
 * from what the API server set (signer, requester) and, only when those do
 * not settle it, the request's CN.
 */
export function isOurs(csr: ApproverCsr, policy: ApproverPolicy): boolean {
  const facts = { signerName: csr.spec.signerName, username: csr.spec.username ?? '', groups: csr.spec.groups ?? [] };
  if (recognize({ ...facts, request: null }, policy) !== null) return true;
  if (!decidedSigners(policy).has(csr.spec.signerName)) return false;
  const commonName = commonNameOf(csr.spec.request ?? '');
  return commonName !== null && recognize({ ...facts, request: subjectOnlyFacts(commonName) }, policy) !== null;
}

/** Metadata a pending CSR of ours keeps: all the /approval write needs of it but the stored labels and the like (api.ts). */
const KEPT_METADATA = ['name', 'generateName', 'uid', 'resourceVersion', 'creationTimestamp'] as const;
/** Metadata the approver can drop without a look at the stored object: the subresource write keeps the stored managedFields. */
const DROPPED_UNSEEN = new Set<string>([...KEPT_METADATA, 'managedFields']);

/** What the approver keeps of `csr`; `policy` says which CSRs are ours (isOurs). */
export function retain(csr: ApproverCsr, policy: ApproverPolicy): ApproverCsr {
  if (isSettled(csr)) return stub(csr);
  if (!isOurs(csr, policy)) return { ...stub(csr), notOurs: true };
  const source = csr.metadata as Record<string, unknown>;
  const metadata = Object.fromEntries(KEPT_METADATA.filter((k) => source[k] !== undefined).map((k) => [k, source[k]]));
  const { request, signerName, username, uid, groups, extra, usages, expirationSeconds } = csr.spec;
  const spec = { request, signerName, username, uid, groups, extra, usages, expirationSeconds };
  const kept: ApproverCsr = {
    kind: 'CertificateSigningRequest',
    metadata: metadata as ApproverCsr['metadata'],
    spec: Object.fromEntries(Object.entries(spec).filter(([, v]) => v !== undefined)) as ApproverCsr['spec'],
    ...(csr.status?.conditions?.length ? { status: { conditions: csr.status.conditions } } : {}),
    ...(Object.keys(source).some((k) => !DROPPED_UNSEEN.has(k)) ? { metadataDropped: true } : {}),
  };
  const bytes = requestBytes(csr);
  if (bytes <= MAX_REQUEST_BYTES) return kept;
  return { ...kept, spec: { ...kept.spec, request: '' }, oversizedRequest: { bytes, commonName: commonNameOf(request) } };
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
    const cn = unambiguousCsrLayout(Buffer.from(requestBase64, 'base64').toString('utf8'))
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
