/**
 * The approver's API calls: Node look-up, the claims it writes on the
 * records of agent/records/ (which it reads through their informers),
 * SubjectAccessReview,
 * the /approval subresource and Events. Each is one request; errors
 * propagate (the worker retries the CSR later).
 */
import { dns1123SubdomainProblem } from '../config/values.js';
import { ApiError, KubebootError } from '../errors.js';
import { MAX_OBJECT_BYTES, type KubeClient } from '../kube/client.js';
import { expectObject, objectPath } from '../kube/objects.js';
import { KINDS, recordRef, recordsPath, type RecordObject, type RecordObjects, type RecordResource } from '../records/kinds.js';
import type { ApproverCsr } from './csr-facts.js';
import { CSR_PATH } from './informer.js';
import type { NodeAddress } from './rules/rule.js';

export const APPROVER_REASON = 'KubebootApprover';
export const EVENT_SOURCE = 'kubeboot-approver';

const NODES = '/api/v1/nodes';
/** Where the approver's access to the records is granted. */
const RECORDS_MANIFEST = 'packaging/manifests/approver/node-identity.yaml';

export interface NodeFacts {
  name: string;
  addresses: NodeAddress[];
  labels: Record<string, string>;
}

/** The Node named `name`, or null when there is none; anything but that Node read back is an error. */
export async function getNode(client: KubeClient, name: string, signal?: AbortSignal): Promise<NodeFacts | null> {
  const res = await client.request('GET', objectPath(NODES, name), { accept: [404], signal });
  if (res.status === 404) return null;
  const node = expectObject<{
    kind: 'Node';
    metadata: { name: string; labels?: Record<string, string> };
    status?: { addresses?: NodeAddress[] };
  }>(res.body, 'Node', name);
  return { name: node.metadata.name, addresses: node.status?.addresses ?? [], labels: node.metadata.labels ?? {} };
}

function forbidden(err: unknown, what: string): never {
  if (err instanceof ApiError && err.status === 403)
    throw new KubebootError(
      `the approver may not ${what} (apply ${RECORDS_MANIFEST}): no kubelet client CSR is approved without it`,
      undefined,
      { cause: err },
    );
  throw err;
}

/**
 * A spend written before an approval, conditional on the record as read:
 * a status written with the resourceVersion read (binding, mark), or a
 * name's claim created (its existence is the spend) or taken over through a
 * replacement mark with the resourceVersion read; or a TPM enrolment
 * (records/tpm-enrolment.ts) created or replaced the same way, before a
 * challenge or the approval that enrols its AK.
 */
export type Claim =
  | { op: 'status'; resource: 'tokenbindings' | 'nodereplacements'; name: string; resourceVersion: string; status: object }
  | WholeClaim<'nodeclaims'>
  | WholeClaim<'tpmenrolments'>;

/** A record written whole: created (a 409 is someone else's first), or replaced on the resourceVersion read. */
export type WholeClaim<R extends 'nodeclaims' | 'tpmenrolments' | 'tpmbeacons'> =
  | { op: 'create'; resource: R; name: string; object: RecordObjects[R] }
  | { op: 'replace'; resource: R; name: string; resourceVersion: string; object: RecordObjects[R] };

/** The record a claim writes, as the API server answered; null when it changed, appeared or went meanwhile (409, 404). */
export async function writeClaim(
  client: KubeClient,
  claim: Claim | WholeClaim<'tpmbeacons'>,
  signal?: AbortSignal,
): Promise<RecordObject | null> {
  const collection = recordsPath(claim.resource);
  const accept = [404, 409];
  try {
    let res: { status: number; body: unknown };
    if (claim.op === 'create') res = await client.request('POST', collection, { body: claim.object, accept, signal });
    else if (claim.op === 'replace')
      res = await client.request('PUT', objectPath(collection, claim.name), {
        body: { ...claim.object, metadata: { ...claim.object.metadata, resourceVersion: claim.resourceVersion } },
        accept,
        signal,
      });
    // A resourceVersion in a merge patch is a precondition: 409 when the record changed since it was read.
    else
      res = await client.request('PATCH', `${objectPath(collection, claim.name)}/status`, {
        body: { metadata: { resourceVersion: claim.resourceVersion }, status: claim.status },
        contentType: 'application/merge-patch+json',
        accept,
        signal,
      });
    return res.status === 404 || res.status === 409 ? null : expectObject<RecordObject>(res.body, KINDS[claim.resource], claim.name);
  } catch (err) {
    return forbidden(err, `write ${recordRef(claim.resource, claim.name)}${claim.op === 'status' ? ' status' : ''}`);
  }
}

/** A record read now, past the informer (after a claim met a change): null when there is none. */
export async function getRecord<R extends RecordResource>(
  client: KubeClient,
  resource: R,
  name: string,
  signal?: AbortSignal,
): Promise<RecordObjects[R] | null> {
  try {
    const res = await client.request('GET', objectPath(recordsPath(resource), name), { accept: [404], signal });
    return res.status === 404 ? null : expectObject<RecordObjects[R]>(res.body, KINDS[resource], name);
  } catch (err) {
    return forbidden(err, `read ${recordRef(resource, name)}`);
  }
}

/** matches sarapprove.go authorize(): the review is for the CSR's own user, uid, groups and extra. */
export async function subjectAccessReview(
  client: KubeClient,
  csr: ApproverCsr,
  subresource: string,
  signal?: AbortSignal,
): Promise<boolean> {
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
  const res = await client.request<{ status?: { allowed?: boolean } }>('POST', '/apis/authorization.k8s.io/v1/subjectaccessreviews', {
    body,
    signal,
  });
  return res.body.status?.allowed === true;
}

/** What writing a decision came to: the CSR as it now is, or why it was not written. */
export type DecisionWrite = { kind: 'written'; csr: ApproverCsr } | { kind: 'conflict' } | { kind: 'not-found' };

/**
 * Adds the condition through /approval with the cached resourceVersion, so a
 * CSR that changed meanwhile (another approver got there first) is a 409 and
 * never carries two decisions. A 404 means the CSR is gone, or has a name
 * the API server accepts in a body but cannot route in a path (control
 * characters): nothing can decide it by name, so it is not retried.
 *
 * The approval strategy takes the spec as stored, the conditions from the
 * body, and the metadata from the body too (labels, annotations: checked on
 * v1.34): a CSR whose labels and the like retain.ts dropped is read back
 * first and sent with its stored metadata, so deciding it never changes them.
 */
export async function decideCsr(
  client: KubeClient,
  csr: ApproverCsr,
  type: 'Approved' | 'Denied',
  message: string,
  signal?: AbortSignal,
  reason: string = APPROVER_REASON,
): Promise<DecisionWrite> {
  const condition = { type, status: 'True', reason, message };
  const path = objectPath(CSR_PATH, csr.metadata.name);
  let metadata: Record<string, unknown> = csr.metadata;
  if (csr.metadataDropped) {
    // A list by name, not a get: the approver's RBAC grants list and watch on CSRs, not get.
    const name = csr.metadata.name.replace(/[\\,=]/g, (c) => `\\${c}`);
    const res = await client.request<{ items?: ApproverCsr[] }>('GET', CSR_PATH, {
      query: { fieldSelector: `metadata.name=${name}` },
      maxBodyBytes: MAX_OBJECT_BYTES,
      signal,
    });
    const stored = (res.body.items ?? []).find((item) => item.metadata?.name === csr.metadata.name);
    if (stored === undefined) return { kind: 'not-found' };
    // Another version than the one decided on: decided again on what the watch brings.
    if (stored.metadata.uid !== csr.metadata.uid || stored.metadata.resourceVersion !== csr.metadata.resourceVersion)
      return { kind: 'conflict' };
    const { managedFields: _, ...rest } = stored.metadata as Record<string, unknown>;
    metadata = rest;
  }
  // A request too large to keep (retain.ts) is sent as '': the stored one stays.
  const { oversizedRequest: _, metadataDropped: __, notOurs: ___, ...object } = csr;
  const body = {
    ...object,
    apiVersion: 'certificates.k8s.io/v1',
    kind: 'CertificateSigningRequest',
    metadata,
    status: { ...csr.status, conditions: [...(csr.status?.conditions ?? []), condition] },
  };
  const res = await client.request('PUT', `${path}/approval`, { body, accept: [404, 409], signal });
  if (res.status === 409) return { kind: 'conflict' };
  if (res.status === 404) return { kind: 'not-found' };
  return { kind: 'written', csr: expectObject<ApproverCsr>(res.body, 'CertificateSigningRequest', csr.metadata.name) };
}

/** A Warning Event on the CSR (cluster-scoped objects' events live in `default`, as client-go's recorder puts them). */
export async function warnOnCsr(
  client: KubeClient,
  csr: ApproverCsr,
  reason: string,
  message: string,
  at: Date,
  signal?: AbortSignal,
): Promise<void> {
  const now = at.toISOString().replace(/\.\d{3}Z$/, 'Z');
  const body = {
    apiVersion: 'v1',
    kind: 'Event',
    // Named after the CSR as client-go's recorder does, when that makes a valid
    // Event name: a CSR's name may be 40,000 characters with newlines in it.
    metadata: {
      generateName: `${csr.metadata.name.length <= 200 && dns1123SubdomainProblem(csr.metadata.name) === null ? csr.metadata.name : 'csr'}.`,
      namespace: 'default',
    },
    involvedObject: {
      apiVersion: 'certificates.k8s.io/v1',
      kind: 'CertificateSigningRequest',
      name: csr.metadata.name,
      uid: csr.metadata.uid,
    },
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
