/**
 * The API conversation of a CA rotation, as the node has it: read the
 * published bundle, ask whether this node could change it, and keep the
 * node's own rotation annotation current. Every call goes over the node's
 * own client (its kubelet certificate, the CA bundle it trusts now).
 */
import { KubebootError } from '../errors.js';
import { canonicalPin } from '../pki/pin-format.js';
import type { KubeClient } from './client.js';
import { clusterInfoDigest, SIGNER_ANNOTATION, STATEMENT_JWS_KEY, STATEMENT_KEY } from './cluster-info-digest.js';
import { CLUSTER_INFO, CLUSTER_INFO_MAX_BYTES, caFromClusterInfo } from './discovery.js';
import { expectObject, objectPath } from './objects.js';

export const CLUSTER_INFO_NAMESPACE = 'kube-public';
export const CLUSTER_INFO_NAME = 'cluster-info';
export { SIGNER_ANNOTATION, STATEMENT_JWS_KEY, STATEMENT_KEY };
/** On each Node: what its kubeboot trusts and holds, for `kubeboot ca-rotation status`. */
export const NODE_ANNOTATION = 'kubeboot.io/ca-rotation';

export interface PublishedTrust {
  /** The CA bundle of cluster-info's kubeconfig; null when cluster-info has none. */
  caPem: string | null;
  /** The annotation's canonical pin, or null when not published or not a pin: for people; nodes follow the signed statement's. */
  signerPin: string | null;
  /** The trust statement and its detached JWS (trust/statement.ts), as published; nulls when absent. */
  signed: { payload: string | null; jws: string | null };
  /** clusterInfoDigest of what was read: the resting daemon's cheap look compares it. */
  digest: string;
}

interface ConfigMap {
  kind?: string;
  metadata?: { name?: string; annotations?: Record<string, string> };
  data?: Record<string, string>;
}

/**
 * GET cluster-info with resourceVersion=0: answered from the API server's
 * watch cache, not etcd, which is what makes a fleet's polling cheap; a
 * slightly stale answer is caught up on the next look.
 */
export async function readPublishedTrust(client: KubeClient, signal?: AbortSignal): Promise<PublishedTrust> {
  const res = await client.request<ConfigMap>('GET', CLUSTER_INFO, {
    query: { resourceVersion: '0' },
    maxBodyBytes: CLUSTER_INFO_MAX_BYTES,
    ...(signal ? { signal } : {}),
  });
  const cm = expectObject<ConfigMap>(res.body, 'ConfigMap', CLUSTER_INFO_NAME);
  const kubeconfig = cm.data?.kubeconfig;
  let caPem: string | null = null;
  if (kubeconfig) {
    try {
      caPem = caFromClusterInfo(kubeconfig);
    } catch (err) {
      // Handed on as text that is no bundle, so the decision refuses it with its reason.
      caPem = `unparseable: ${(err as Error).message}`;
    }
  }
  const annotation = cm.metadata?.annotations?.[SIGNER_ANNOTATION];
  return {
    caPem,
    signerPin: annotation ? canonicalPin(annotation) : null,
    signed: { payload: cm.data?.[STATEMENT_KEY] ?? null, jws: cm.data?.[STATEMENT_JWS_KEY] ?? null },
    digest: clusterInfoDigest(cm),
  };
}

interface ResourceAttributes {
  namespace?: string;
  verb: string;
  resource: string;
  name?: string;
}

const configMaps = { namespace: CLUSTER_INFO_NAMESPACE, resource: 'configmaps' };
const clusterInfo = { ...configMaps, name: CLUSTER_INFO_NAME };
/** Each row is one way to write cluster-info: the requester has it when every review in the row is allowed. */
const WAYS_TO_WRITE_CLUSTER_INFO: readonly (readonly ResourceAttributes[])[] = [
  [{ ...clusterInfo, verb: 'update' }],
  [{ ...clusterInfo, verb: 'patch' }],
  [{ ...clusterInfo, verb: 'delete' }],
  // RBAC cannot narrow create or deletecollection to a name, so together they replace it.
  [
    { ...configMaps, verb: 'deletecollection' },
    { ...configMaps, verb: 'create' },
  ],
  // Impersonation acts as anyone, system:masters included. Extras and UIDs are impersonated only alongside a user, so users covers them.
  [{ verb: 'impersonate', resource: 'users' }],
  [{ verb: 'impersonate', resource: 'groups' }],
  // kube-system runs the controllers whose accounts may write cluster-info; a cluster-wide grant answers here too.
  [{ namespace: 'kube-system', verb: 'impersonate', resource: 'serviceaccounts' }],
];

/**
 * Whether the requester could write cluster-info in any of the ways above,
 * asked as SelfSubjectAccessReviews all at once (over HTTP/2 one connection,
 * so a look costs one round trip).
 * Defence in depth: it refuses a misconfigured cluster, one whose nodes can
 * write their own trust. It proves nothing about a trust change; that proof is
 * a signature by a CA the node already trusts. It sees only these grants, not
 * an impersonation narrowed to named users nor a detour through other objects
 * (a pod in kube-system running as a controller's service account).
 */
export async function canChangeClusterInfo(client: KubeClient, signal?: AbortSignal): Promise<boolean> {
  const allowed = (resourceAttributes: ResourceAttributes) =>
    client
      .request<{ status?: { allowed?: boolean } }>('POST', '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews', {
        body: { apiVersion: 'authorization.k8s.io/v1', kind: 'SelfSubjectAccessReview', spec: { resourceAttributes } },
        ...(signal ? { signal } : {}),
      })
      .then((res) => res.body.status?.allowed === true);
  const ways = await Promise.all(WAYS_TO_WRITE_CLUSTER_INFO.map((way) => Promise.all(way.map(allowed))));
  return ways.some((answers) => answers.every(Boolean));
}

/** Merge-patches one annotation on the node's own Node (NodeRestriction allows a node its own object's annotations). */
export async function annotateNode(client: KubeClient, nodeName: string, value: string, signal?: AbortSignal): Promise<void> {
  if (value.length > 4096) throw new KubebootError(`${NODE_ANNOTATION}: annotation of ${value.length} characters is too long`);
  await client.request('PATCH', objectPath('/api/v1/nodes', nodeName), {
    body: { metadata: { annotations: { [NODE_ANNOTATION]: value } } },
    contentType: 'application/merge-patch+json',
    ...(signal ? { signal } : {}),
  });
}

/**
 * A Warning Event on the node's own Node, as the kubelet records its own
 * (namespace default, involvedObject the Node); nodes may create Events.
 */
export async function nodeWarning(
  client: KubeClient,
  nodeName: string,
  reason: string,
  message: string,
  now: Date,
  signal?: AbortSignal,
): Promise<void> {
  const at = now.toISOString();
  await client.request('POST', '/api/v1/namespaces/default/events', {
    body: {
      apiVersion: 'v1',
      kind: 'Event',
      metadata: { generateName: `${nodeName}.kubeboot-`, namespace: 'default' },
      involvedObject: { apiVersion: 'v1', kind: 'Node', name: nodeName, uid: nodeName },
      reason,
      message: message.slice(0, 1024),
      type: 'Warning',
      source: { component: 'kubeboot', host: nodeName },
      reportingComponent: 'kubeboot',
      reportingInstance: nodeName,
      firstTimestamp: at,
      lastTimestamp: at,
      count: 1,
    },
    ...(signal ? { signal } : {}),
  });
}
