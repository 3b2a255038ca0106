/**
 * The cluster admin's side of a CA rotation: publish a CA bundle (and which
 * CA the signer issues under) in kube-public/cluster-info, and read every
 * node's progress from the annotation its kubeboot keeps current. A step is
 * finished only when every node is ready for the next one.
 */
import { parse, stringify } from 'yaml';
import { InputError, KubebootError } from '../errors.js';
import type { KubeClient } from '../kube/client.js';
import { CLUSTER_INFO } from '../kube/discovery.js';
import { expectObject } from '../kube/objects.js';
import { NODE_ANNOTATION, readPublishedTrust, SIGNER_ANNOTATION } from '../kube/trust-requests.js';
import { canonicalPin } from '../pki/pin-format.js';
import { checkBundle, type TrustBundle } from '../trust/bundle.js';

interface ConfigMap {
  kind?: string;
  metadata: { name?: string; resourceVersion?: string; annotations?: Record<string, string> };
  data?: Record<string, string>;
}

/** The bundle as the admin gave it, checked as a node will check it; `file` names it in errors. */
export function bundleFromFile(file: string, pem: string, now: Date): TrustBundle {
  const checked = checkBundle(pem, now, file);
  if (!checked.ok) throw new InputError(file, 'CA bundle', checked.message.slice(file.length + 2));
  return checked.bundle;
}

/**
 * Replaces the CA bundle of cluster-info's kubeconfig and the signer
 * annotation (null removes it), with the resourceVersion read, so a
 * concurrent change (the bootstrapsigner adding a signature) is retried, not
 * overwritten. The bootstrapsigner re-signs the new kubeconfig by itself.
 */
export async function publishTrust(client: KubeClient, bundle: TrustBundle, signerPin: string | null): Promise<void> {
  if (signerPin !== null && !bundle.pins.includes(signerPin))
    throw new KubebootError(`the signer CA ${signerPin} is not in the bundle; publish a bundle that contains it`);
  for (let attempt = 0; ; attempt++) {
    const cm = expectObject<ConfigMap>((await client.request('GET', CLUSTER_INFO)).body, 'ConfigMap', 'cluster-info');
    const doc = parse(cm.data?.kubeconfig ?? '') as { clusters?: { cluster?: Record<string, string> }[] } | null;
    const cluster = doc?.clusters?.[0]?.cluster;
    if (!doc || !cluster) throw new KubebootError('kube-public/cluster-info: data.kubeconfig has no cluster to put the CA bundle in');
    cluster['certificate-authority-data'] = Buffer.from(bundle.pem, 'utf8').toString('base64');
    const annotations = { ...(cm.metadata.annotations ?? {}) };
    if (signerPin === null) delete annotations[SIGNER_ANNOTATION];
    else annotations[SIGNER_ANNOTATION] = signerPin;
    const updated = {
      ...cm,
      metadata: { ...cm.metadata, annotations },
      data: { ...cm.data, kubeconfig: stringify(doc, { lineWidth: 0 }) },
    };
    const res = await client.request('PUT', CLUSTER_INFO, { body: updated, accept: [409] });
    if (res.status !== 409) return;
    if (attempt >= 5) throw new KubebootError('kube-public/cluster-info kept changing while it was updated; try again');
  }
}

export interface NodeProgress {
  name: string;
  /** Its files hold the published bundle. */
  trusts: boolean;
  /** ...and its kubelet and kube-proxy were restarted onto it. */
  active: boolean;
  /** Every certificate it reports hangs from the signer CA. */
  underSigner: boolean;
  /** Why it is not ready, in words; null when it is. */
  lag: string | null;
}

export interface Progress {
  nodes: NodeProgress[];
  trusting: number;
  underSigner: number;
  ready: boolean;
}

interface NodeList {
  items: { metadata: { name: string; annotations?: Record<string, string> } }[];
}

/** Every Node's state against the published bundle and signer, from its annotation. */
export async function rotationProgress(client: KubeClient, bundle: TrustBundle, signerPin: string | null): Promise<Progress> {
  const list = (await client.request<NodeList>('GET', '/api/v1/nodes')).body;
  const nodes = list.items.map((node): NodeProgress => {
    const name = node.metadata.name;
    const raw = node.metadata.annotations?.[NODE_ANNOTATION];
    if (!raw)
      return {
        name,
        trusts: false,
        active: false,
        underSigner: false,
        lag: `no ${NODE_ANNOTATION} annotation (kubeboot not running, too old, or CA rotation off)`,
      };
    let status: { bundle?: string; active?: boolean; issuers?: Record<string, string | null>; refused?: string | null };
    try {
      status = JSON.parse(raw) as typeof status;
    } catch {
      return { name, trusts: false, active: false, underSigner: false, lag: `${NODE_ANNOTATION} is not JSON` };
    }
    const trusts = status.bundle === bundle.hash;
    const active = trusts && status.active === true;
    const issuers = Object.entries(status.issuers ?? {});
    const stale = signerPin === null ? [] : issuers.filter(([, pin]) => pin !== signerPin).map(([identity]) => identity);
    const underSigner = signerPin !== null && issuers.length > 0 && stale.length === 0;
    const lag = status.refused
      ? `refuses the published bundle: ${status.refused}`
      : !trusts
        ? 'has not picked up the published bundle yet'
        : !active
          ? 'waits for its slot to restart the kubelet or kube-proxy'
          : signerPin !== null && !underSigner
            ? `still holds ${stale.join(', ') || 'no'} certificate(s) from another CA (re-issued at its slot in the window)`
            : null;
    return { name, trusts, active, underSigner, lag };
  });
  return {
    nodes,
    trusting: nodes.filter((n) => n.active).length,
    underSigner: nodes.filter((n) => n.underSigner).length,
    ready: nodes.every((n) => n.lag === null),
  };
}

/** What cluster-info publishes now: its bundle (checked as a node checks it) and signer pin. */
export async function readPublished(client: KubeClient, now: Date): Promise<{ bundle: TrustBundle; signerPin: string | null }> {
  const published = await readPublishedTrust(client);
  if (published.caPem === null) throw new KubebootError('kube-public/cluster-info publishes no CA bundle');
  const checked = checkBundle(published.caPem, now, 'kube-public/cluster-info');
  if (!checked.ok) throw new KubebootError(checked.message);
  return { bundle: checked.bundle, signerPin: published.signerPin };
}

export function parseSignerPin(text: string): string {
  const pin = canonicalPin(text);
  if (pin === null) throw new InputError('command line', '--signer-ca-hash', 'expected sha256:<64 hex digits>');
  return pin;
}
