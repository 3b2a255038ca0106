/**
 * The approver's API calls: Node look-up, SubjectAccessReview, the
 * /approval subresource and Events. Each is one request; errors propagate
 * (the worker retries the CSR later).
 */
import type { KubeClient } from '../kube/client.js';
import type { ApproverCsr } from './csr.js';
import { CSR_PATH } from './informer.js';
import type { NodeAddress } from './policy.js';

export const APPROVER_REASON = 'KubebootApprover';
export const EVENT_SOURCE = 'kubeboot-approver';

export async function getNode(client: KubeClient, name: string, signal?: AbortSignal): Promise<{ name: string; addresses: NodeAddress[] } | null> {
  const res = await client.request<{ metadata: { name: string }; status?: { addresses?: NodeAddress[] } }>('GET', `/api/v1/nodes/${encodeURIComponent(name)}`, { accept: [404], signal });
  if (res.status === 404) return null;
  return { name: res.body.metadata.name, addresses: res.body.status?.addresses ?? [] };
}

/** matches sarapprove.go authorize(): the review is for the CSR's own user, uid, groups and extra. */
export async function subjectAccessReview(client: KubeClient, csr: ApproverCsr, subresource: string, signal?: AbortSignal): Promise<boolean> {
  const body = {
    apiVersion: 'authorization.k8s.io/v1',
    kind: 'SubjectAccessReview',
    spec: {
      user: csr.spec.username,
      uid: csr.spec.uid,
      groups: csr.spec.groups,
      extra: csr.spec.extra,
      resourceAttributes: { group: 'certificates.k8s.io', resource: 'certificatesigningrequests', verb: 'create', subresource },
    },
  };
  const res = await client.request<{ status?: { allowed?: boolean } }>('POST', '/apis/authorization.k8s.io/v1/subjectaccessreviews', { body, signal });
  return res.body.status?.allowed === true;
}

/**
 * Adds the condition through /approval with the cached resourceVersion, so a
 * CSR that changed meanwhile (another approver got there first) is a 409 and
 * never carries two decisions. Returns false on that conflict.
 */
export async function decideCsr(client: KubeClient, csr: ApproverCsr, type: 'Approved' | 'Denied', message: string, signal?: AbortSignal): Promise<boolean> {
  const condition = { type, status: 'True', reason: APPROVER_REASON, message };
  const body = { ...csr, status: { ...csr.status, conditions: [...(csr.status?.conditions ?? []), condition] } };
  const res = await client.request('PUT', `${CSR_PATH}/${encodeURIComponent(csr.metadata.name)}/approval`, { body, accept: [409], signal });
  return res.status !== 409;
}

/** A Warning Event on the CSR (cluster-scoped objects' events live in `default`, as client-go's recorder puts them). */
export async function warnOnCsr(client: KubeClient, csr: ApproverCsr, reason: string, message: string, signal?: AbortSignal): Promise<void> {
  const now = new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
  const body = {
    apiVersion: 'v1',
    kind: 'Event',
    metadata: { generateName: `${csr.metadata.name}.`, namespace: 'default' },
    involvedObject: { apiVersion: 'certificates.k8s.io/v1', kind: 'CertificateSigningRequest', name: csr.metadata.name, uid: csr.metadata.uid },
    type: 'Warning',
    reason,
    message: message.slice(0, 1024),
    source: { component: EVENT_SOURCE },
    firstTimestamp: now,
    lastTimestamp: now,
    count: 1,
  };
  await client.request('POST', '/api/v1/namespaces/default/events', { body, signal });
}
