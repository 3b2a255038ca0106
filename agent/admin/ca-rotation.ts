/**
 * The cluster admin's side of a CA rotation: publish a CA bundle (and which
 * CA the signer issues under) in kube-public/cluster-info, and read every
 * node's progress from the annotation its kubeboot keeps current. A step is
 * finished only when every node is ready for the next one.
 */
import { parse, stringify } from 'yaml';
import { createPublicKey, type KeyObject } from 'node:crypto';
import { ExitCode, InputError, KubebootError } from '../errors.js';
import type { KubeClient } from '../kube/client.js';
import { CLUSTER_INFO } from '../kube/discovery.js';
import { expectObject } from '../kube/objects.js';
import { NODE_ANNOTATION, readPublishedTrust, SIGNER_ANNOTATION, STATEMENT_JWS_KEY, STATEMENT_KEY } from '../kube/trust-requests.js';
import { publicKeyDerOfCertificate, samePublicKey } from '../pki/keys.js';
import { canonicalPin } from '../pki/pin-format.js';
import { checkBundle, trustedBundle, type TrustBundle } from '../trust/bundle.js';
import { nextStatement, nextVersion, signStatement, verifyStatement } from '../trust/statement.js';
import { excerpt } from '../text.js';

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

/** What the admin publishes, and with which key it is signed. */
export interface Publication {
  bundle: TrustBundle;
  signerPin: string | null;
  /** The private key of a CA in the bundle published now (the nodes' current trust). Never logged or written. */
  caKey: KeyObject;
  /** How long nodes accept the statement for adding a CA. */
  validForMs: number;
  /** The pins join commands and user-data carry (--ca-cert-hash; by default the admin kubeconfig's CA). */
  joinPins: readonly string[];
  /** The admin knows the new bundle drops a CA join commands pin. */
  dropJoinCa: boolean;
  now: () => Date;
}

export interface Published {
  version: number;
  /** Pin of the CA whose key signed. */
  signedBy: string;
  /** Join pins the new bundle no longer carries: every join command made with them fails from now on. */
  droppedJoinPins: string[];
  /** The signer pin that was published before this one. */
  previousSignerPin: string | null;
  /** A signer pin was given and it is not the one published before: the nodes re-issue what hangs from another CA (reissueCount). */
  signerMoved: boolean;
  /**
   * The version of the statement published before, when it was further ahead of this clock than nodes
   * accept (a CA key used outside publish, or a wrong clock) and so not gone past; null otherwise.
   */
  aheadOfClock: number | null;
}

/** Pure: the CA of `bundle` whose public key is `key`'s, or null. */
export function caOfKey(key: KeyObject, bundle: TrustBundle): { pin: string; at: number } | null {
  const spki = createPublicKey(key).export({ type: 'spki', format: 'der' });
  const at = bundle.cas.findIndex((ca) => samePublicKey(spki, publicKeyDerOfCertificate(ca.pem)));
  return at < 0 ? null : { pin: bundle.pins[at]!, at };
}

/**
 * Replaces the CA bundle of cluster-info's kubeconfig, the signer annotation
 * (null removes it) and the signed trust statement over both
 * (trust/statement.ts), with the resourceVersion read, so a concurrent change
 * (the bootstrapsigner adding a signature) is retried, not overwritten. The
 * bootstrapsigner re-signs the new kubeconfig by itself. Refused before
 * anything is written when the key is no CA's the nodes trust now, or when
 * the bundle drops a CA join commands pin without `dropJoinCa`.
 */
export async function publishTrust(client: KubeClient, p: Publication): Promise<Published> {
  const { bundle, signerPin } = p;
  if (signerPin !== null && !bundle.pins.includes(signerPin))
    throw new KubebootError(`the signer CA ${signerPin} is not in the bundle; publish a bundle that contains it`, ExitCode.badInput);
  for (let attempt = 0; ; attempt++) {
    const cm = expectObject<ConfigMap>((await client.request('GET', CLUSTER_INFO)).body, 'ConfigMap', 'cluster-info');
    const doc = parse(cm.data?.kubeconfig ?? '') as { clusters?: { cluster?: Record<string, string> }[] } | null;
    const cluster = doc?.clusters?.[0]?.cluster;
    if (!doc || !cluster) throw new KubebootError('kube-public/cluster-info: data.kubeconfig has no cluster to put the CA bundle in');
    const now = p.now();
    const trusted = publishedBundle(cluster['certificate-authority-data'], now);
    const signer = caOfKey(p.caKey, trusted);
    if (signer === null)
      throw new KubebootError(
        `--ca-key: the key of no CA in the bundle published now (${trusted.pins.join(', ')}); nodes trust only those and would refuse the change: sign with one of their keys`,
        ExitCode.badInput,
      );
    const dropped = p.joinPins.filter((pin) => trusted.pins.includes(pin) && !bundle.pins.includes(pin));
    if (dropped.length > 0 && !p.dropJoinCa)
      throw new KubebootError(
        `the new bundle drops ${dropped.join(', ')}, the CA your join commands and user-data pin (--ca-cert-hash): every one made before would fail; keep it in the bundle, or pass --drop-join-ca and make new ones`,
        ExitCode.badInput,
      );
    // The version to go past: a statement nodes could hold (signed by a CA of the bundle they trust now);
    // one further ahead than nodes accept (a leaked key's, a wrong clock's) they refused, and is not gone past.
    const signed = { payload: cm.data?.[STATEMENT_KEY] ?? null, jws: cm.data?.[STATEMENT_JWS_KEY] ?? null };
    const previous = verifyStatement({ signed, trusted, now });
    const { version, ignoredAhead } = nextVersion(
      previous.ok ? previous.statement.version : previous.problem === 'future-version' ? (publishedVersion(signed.payload) ?? 0) : 0,
      now,
    );
    const statement = { ...nextStatement(bundle, signerPin, 0, now, p.validForMs), version };
    const signature = signStatement(statement, p.caKey, signer.pin);
    cluster['certificate-authority-data'] = Buffer.from(bundle.pem, 'utf8').toString('base64');
    const annotations = { ...(cm.metadata.annotations ?? {}) };
    const previousSignerPin = previous.ok ? previous.statement.signerPin : null;
    if (signerPin === null) delete annotations[SIGNER_ANNOTATION];
    else annotations[SIGNER_ANNOTATION] = signerPin;
    const updated = {
      ...cm,
      metadata: { ...cm.metadata, annotations },
      data: {
        ...cm.data,
        kubeconfig: stringify(doc, { lineWidth: 0 }),
        [STATEMENT_KEY]: signature.payload,
        [STATEMENT_JWS_KEY]: signature.jws,
      },
    };
    const res = await client.request('PUT', CLUSTER_INFO, { body: updated, accept: [409] });
    if (res.status !== 409) {
      const signerMoved = signerPin !== null && signerPin !== previousSignerPin;
      return {
        version: statement.version,
        signedBy: signer.pin,
        droppedJoinPins: dropped,
        previousSignerPin,
        signerMoved,
        aheadOfClock: ignoredAhead,
      };
    }
    if (attempt >= 5) throw new KubebootError('kube-public/cluster-info kept changing while it was updated; try again');
  }
}

/** The version a published statement claims, read without checking its signature (for a warning only). */
function publishedVersion(payload: string | null): number | null {
  try {
    const version = (JSON.parse(payload ?? 'null') as { version?: unknown } | null)?.version;
    return typeof version === 'number' && Number.isSafeInteger(version) ? version : null;
  } catch {
    return null;
  }
}

/** The bundle cluster-info publishes now, read as nodes trust it (an expired CA still counts: it may sign its successor). */
function publishedBundle(caData: string | undefined, now: Date): TrustBundle {
  const pem = Buffer.from(caData ?? '', 'base64').toString('utf8');
  const checked = checkBundle(pem, now, 'kube-public/cluster-info');
  if (checked.ok) return checked.bundle;
  try {
    return trustedBundle(pem);
  } catch {
    throw new KubebootError(`${checked.message}: nothing to sign against; repair data.kubeconfig first`);
  }
}

/**
 * Certificates every node will re-issue when the signer moves to `signerPin`:
 * those its annotation says hang from another CA, counted per node.
 */
export async function reissueCount(client: KubeClient, signerPin: string): Promise<{ nodes: number; certificates: number }> {
  const list = (await client.request<NodeList>('GET', '/api/v1/nodes')).body;
  let nodes = 0;
  let certificates = 0;
  for (const node of list.items) {
    let status: { issuers?: Record<string, string | null> };
    try {
      status = JSON.parse(node.metadata.annotations?.[NODE_ANNOTATION] ?? '{}') as typeof status;
    } catch {
      continue;
    }
    const stale = Object.values(status.issuers ?? {}).filter((pin) => pin !== signerPin).length;
    if (stale > 0) nodes++;
    certificates += stale;
  }
  return { nodes, certificates };
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
  /** Named by `retire --skip-node`: not waited for, whatever its lag. */
  skipped: boolean;
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

/** Longest `lag` shown: a refusal reason is a word, but the node writes its annotation and can make it 256 KiB. */
const MAX_LAG = 512;

/**
 * Every Node's state against the published bundle and signer, from its
 * annotation. Each node writes its own annotation: its words (and its name)
 * come back bounded and escaped, whoever prints or logs them.
 */
export async function rotationProgress(
  client: KubeClient,
  bundle: TrustBundle,
  signerPin: string | null,
  skip: ReadonlySet<string> = new Set(),
): Promise<Progress> {
  const list = (await client.request<NodeList>('GET', '/api/v1/nodes')).body;
  const nodes = list.items.map(
    (node): NodeProgress => ({ ...nodeProgress(node, bundle, signerPin), skipped: skip.has(node.metadata.name) }),
  );
  return {
    nodes,
    trusting: nodes.filter((n) => n.active).length,
    underSigner: nodes.filter((n) => n.underSigner).length,
    ready: nodes.every((n) => n.lag === null || n.skipped),
  };
}

function nodeProgress(node: NodeList['items'][number], bundle: TrustBundle, signerPin: string | null): Omit<NodeProgress, 'skipped'> {
  const name = excerpt(node.metadata.name);
  const raw = node.metadata.annotations?.[NODE_ANNOTATION];
  if (!raw)
    return {
      name,
      trusts: false,
      active: false,
      underSigner: false,
      lag: `no ${NODE_ANNOTATION} annotation (kubeboot not running, too old, or CA rotation off)`,
    };
  let status: { bundle?: string; active?: boolean; issuers?: Record<string, string | null>; refused?: unknown } | null;
  try {
    status = JSON.parse(raw) as typeof status;
  } catch {
    status = null;
  }
  if (typeof status !== 'object' || status === null)
    return { name, trusts: false, active: false, underSigner: false, lag: `${NODE_ANNOTATION} is not a JSON object` };
  const trusts = status.bundle === bundle.hash;
  const active = trusts && status.active === true;
  const issuers = Object.entries(status.issuers ?? {});
  const stale = signerPin === null ? [] : issuers.filter(([, pin]) => pin !== signerPin).map(([identity]) => identity);
  const underSigner = signerPin !== null && issuers.length > 0 && stale.length === 0;
  // A string, as kubeboot writes it; anything else as JSON (`${…}` on {"toString":1} would throw).
  const refused = typeof status.refused === 'string' ? status.refused : status.refused ? JSON.stringify(status.refused) : null;
  const lag = refused
    ? `refuses the published bundle: ${refused}`
    : !trusts
      ? 'has not picked up the published bundle yet'
      : !active
        ? 'waits for its slot to restart the kubelet or kube-proxy'
        : signerPin !== null && !underSigner
          ? `still holds ${stale.join(', ') || 'no'} certificate(s) from another CA (re-issued at its slot in the window)`
          : null;
  return { name, trusts, active, underSigner, lag: lag === null ? null : excerpt(lag, MAX_LAG) };
}

/** What cluster-info publishes now: its bundle (checked as a node checks it) and signer pin. */
export async function readPublished(client: KubeClient, now: Date): Promise<{ bundle: TrustBundle; signerPin: string | null }> {
  const published = await readPublishedTrust(client);
  if (published.caPem === null) throw new KubebootError('kube-public/cluster-info publishes no CA bundle');
  const checked = checkBundle(published.caPem, now, 'kube-public/cluster-info');
  if (!checked.ok) throw new KubebootError(checked.message);
  return { bundle: checked.bundle, signerPin: published.signerPin };
}

/**
 * Words a failed request by what it was for (`explainAdminError` with the
 * admin's cluster); what is not a request's failure is passed on as it is.
 */
export type Explain = (err: unknown, doing: string) => unknown;

const asItIs: Explain = (err) => err;

/** Every node's progress against what cluster-info publishes now. */
export async function publishedProgress(client: KubeClient, now: Date): Promise<Progress> {
  const published = await readPublished(client, now);
  return rotationProgress(client, published.bundle, published.signerPin);
}

/**
 * The last step: `bundle` (read from `file`) replaces the published one,
 * dropping the old CA, only when the signer CA is published and in it and
 * every node is ready; otherwise nothing is published, and the nodes'
 * progress says why. The signing key is asked for only then.
 */
export async function retireCa(
  client: KubeClient,
  retiring: { bundle: TrustBundle; file: string; now: Date; skip?: readonly string[] },
  signing: () => Promise<Omit<Publication, 'bundle' | 'signerPin'>>,
  explain: Explain = asItIs,
): Promise<{ retired: Published; progress: Progress } | { notReady: Progress }> {
  const { bundle, file, now } = retiring;
  const published = await readPublished(client, now).catch(failed(explain, 'read kube-public/cluster-info'));
  if (published.signerPin === null || !bundle.pins.includes(published.signerPin))
    throw new KubebootError(
      `${file}: retiring needs the signer CA published first (kubeboot ca-rotation publish BUNDLE --signer-ca-hash …) and in this bundle`,
      ExitCode.badInput,
    );
  const skip = new Set(retiring.skip ?? []);
  const progress = await rotationProgress(client, published.bundle, published.signerPin, skip).catch(failed(explain, 'list Nodes'));
  // A name that is no Node (a typo) would skip nothing and look like it did.
  const unknown = [...skip].filter((name) => !progress.nodes.some((n) => n.skipped && n.name === excerpt(name)));
  if (unknown.length > 0)
    throw new KubebootError(`--skip-node ${excerpt(unknown.join(', '))}: no Node of that name; nothing was published`, ExitCode.badInput);
  if (!progress.ready) return { notReady: progress };
  // Retiring drops the old CA by design, the one old join commands pin among them: said, not refused.
  const publication = { ...(await signing()), dropJoinCa: true, bundle, signerPin: published.signerPin };
  return { retired: await publishTrust(client, publication).catch(failed(explain, 'update kube-public/cluster-info')), progress };
}

function failed(explain: Explain, doing: string): (err: unknown) => never {
  return (err) => {
    throw explain(err, doing);
  };
}

export function parseSignerPin(text: string): string {
  const pin = canonicalPin(text);
  if (pin === null) throw new InputError('command line', '--signer-ca-hash', 'expected sha256:<64 hex digits>');
  return pin;
}
