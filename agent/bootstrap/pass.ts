/**
 * One pass over a node, for one command or one daemon wake-up, read top to
 * bottom like the kubelet's LoadClientCert:
 * recover half-done swaps → assess every identity → the kubelet's
 * credential, asked for with the bootstrap credential (the bootstrap
 * kubeconfig, or the join settings with the CA discovered and kept in
 * memory) → the other identities, requested by the node itself (the kubelet
 * never waits for them) → only when all are proven, delete the bootstrap
 * kubeconfig.
 *
 * Each thing is decided once per pass: the store recovers and the identities
 * are assessed in `openPass`, and the bootstrap kubeconfig is read and parsed
 * at most once (`bootstrapOf`), whether it then asks for the kubelet's
 * certificate or is deleted.
 */
import type { Config } from '../config/types.js';
import { BootstrapCredentialError, DeadTokenError, KubebootError } from '../errors.js';
import { identitiesFor } from '../config/identities.js';
import { parseBootstrapKubeconfig, type BootstrapKubeconfig } from '../kubeconfig/parse.js';
import type { ReadFile } from '../read-optional.js';
import { splitCredential } from '../store/cert-store.js';
import { storeOf, type Store } from '../store/store.js';
import {
  allOf,
  assessIdentity,
  assessNode,
  isNodeCredential,
  type Assessment,
  type NodeAssessment,
  type NodeCredential,
  type Usable,
} from '../credential/assess.js';
import { issueContext, issueCredential, type Issued, type RunDeps } from '../credential/issue.js';
import { seedFloor } from '../trust/floor.js';
import { bootstrapRequester, clusterOf, explainBootstrapFailure, nodeRequester, type Requester } from '../credential/requester.js';
import { finishRenewal, renewIdentity } from '../credential/renew.js';
import { checkJoinSettings, joinCluster, joinRequested } from './join.js';
import { finishBootstrap } from './cleanup.js';
import type { Logger } from '../log.js';

export interface IdentityOutcome {
  identity: string;
  action: 'kept' | 'issued';
  notAfter: Date;
  issued?: Issued;
}

export interface BootstrapReport {
  outcomes: IdentityOutcome[];
  /** The bootstrap kubeconfig this run authenticated with, if any. */
  usedBootstrap: BootstrapKubeconfig | null;
  bootstrapKubeconfigDeleted: boolean;
}

export interface BootstrapOptions {
  /** Only obtain the kubelet's credential (the daemon's other loops request the rest). */
  onlyKubelet?: boolean;
}

/** The bootstrap kubeconfig as one read found it. */
export type FoundBootstrap =
  | { kind: 'absent' }
  /** It is there but does not parse: it cannot ask, and it is deleted all the same once it is not needed. */
  | { kind: 'invalid'; error: Error }
  /** `joined`: written by this pass from the join settings, its CA pinned by discovery. */
  | { kind: 'kubeconfig'; bootstrap: BootstrapKubeconfig; joined?: true };

/** One pass: what it was given, and what it found once. */
export interface Pass {
  readonly config: Config;
  readonly deps: RunDeps;
  readonly store: Store;
  /** Every identity as found after recovery, the kubelet first. */
  readonly node: NodeAssessment;
  /** The bootstrap kubeconfig, once read (or written by a join). */
  found: FoundBootstrap | null;
}

export interface PassOptions {
  /** Join with --server/--token when the kubelet has nothing to ask with (`kubeboot run` joins once, at start). */
  join?: boolean;
}

/**
 * Join settings are checked first, then half-done swaps from a crash are put
 * right, then every identity is judged: once per pass. A kubelet with nothing
 * usable and no bootstrap kubeconfig then joins with the join settings.
 */
export async function openPass(config: Config, deps: RunDeps, options: PassOptions = {}): Promise<Pass> {
  const store = storeOf(deps);
  let found: FoundBootstrap | null = null;
  if (options.join && joinRequested(config)) {
    checkJoinSettings(config);
    found = await findBootstrap(config, store.read);
    if (found.kind !== 'absent') deps.logger.info(`join: ${config.bootstrapKubeconfig} exists; using it instead of --server/--token`);
  }
  await recoverNode(config, deps);
  const node = await assessNode(config, deps.clock.now(), undefined, store);
  await forgetAnsweredKeys(config, node, store, deps.logger);
  if (found !== null && joinsInstead(config, found, node.kubelet.state !== 'usable')) {
    const joined = await joinCluster(config, deps);
    if (joined !== null) found = { kind: 'kubeconfig', bootstrap: joined, joined: true };
  }
  return { config, deps, store, node, found };
}

/**
 * Whether the join settings (--server/--token) stand in for the bootstrap
 * kubeconfig: they are given, none was found, and there is a credential to
 * ask for (`needed`: for a pass, the kubelet has no usable one).
 */
export function joinsInstead(config: Config, found: FoundBootstrap, needed: boolean): boolean {
  return found.kind === 'absent' && needed && joinRequested(config);
}

/** Who would ask for a missing credential: the bootstrap kubeconfig, the join settings, the kubelet's credential, or nobody. */
export type Asker = 'bootstrap' | 'join' | 'kubelet' | null;

/**
 * What a pass would do with `node`, decided as openPass and bootstrapNode
 * decide it, without doing it: `kubeboot check` reports it. `found` is the
 * bootstrap kubeconfig as read (null: it could not be read — the pass would
 * fail on it, and the fix is that file).
 */
export function dryRunPlan(config: Config, node: NodeAssessment, found: FoundBootstrap | null): { asker: Map<Assessment, Asker> } {
  const kubeletUsable = isNodeCredential(node.kubelet);
  const joins = found !== null && joinsInstead(config, found, !kubeletUsable);
  const kubeletAsker: Asker = kubeletUsable ? null : found === null || found.kind !== 'absent' ? 'bootstrap' : joins ? 'join' : null;
  const asker = new Map<Assessment, Asker>();
  for (const a of allOf(node)) {
    if (a.state === 'usable') continue;
    // The kubelet's credential asks for the others, once it has one.
    asker.set(a, a === node.kubelet ? kubeletAsker : kubeletUsable || kubeletAsker !== null ? 'kubelet' : null);
  }
  return { asker };
}

/** Half-done swaps from a crash are put right before anything is judged (each pass of the daemon does it first too). */
export async function recoverNode(config: Config, deps: RunDeps): Promise<void> {
  const store = storeOf(deps);
  for (const identity of identitiesFor(config)) {
    for (const line of await store.recover(identity)) deps.logger.warn(`${identity.name}: ${line}`);
  }
}

/**
 * After a node was assessed: a pending key that a usable credential already
 * holds is forgotten — an issuance stopped after its credential and
 * kubeconfig were stored, before it forgot the key. Kept, that key would be
 * reused by the next renewal and its CSR name would adopt the CSR already
 * issued. A pending key whose credential is not usable yet (its first
 * kubeconfig not written) stays: the next attempt adopts its CSR.
 */
export async function forgetAnsweredKeys(config: Config, node: NodeAssessment, store: Store, logger: Logger): Promise<void> {
  for (const a of allOf(node)) {
    if (a.state !== 'usable') continue;
    const key = await store.pendingKey.load(config.stateDir, a.identity.name).catch(() => null);
    if (key === null || onlyKey(key) !== onlyKey(a.keyPem)) continue;
    await store.pendingKey.clear(config.stateDir, a.identity.name);
    logger.warn(
      `${a.identity.name}: the pending key is the current credential's (its issuance was interrupted after the credential was stored); cleared`,
    );
  }
}

/** The private key's PEM block of a key file or of a certificate-and-key bundle (the kubelet's `-current.pem`), whitespace aside. */
function onlyKey(text: string): string {
  return (splitCredential(text)?.keyPem ?? text).replace(/\s+/g, '');
}

/** `kubeboot bootstrap`, and a node with nothing to renew with: every identity that needs one gets a credential. */
export async function bootstrapNode(pass: Pass, options: BootstrapOptions = {}): Promise<BootstrapReport> {
  const { config, deps, node } = pass;
  for (const a of allOf(node)) {
    deps.logger.info(
      a.state === 'usable'
        ? `${a.identity.name}: credential valid until ${a.notAfter.toISOString()}; keeping it`
        : `${a.identity.name}: needs a certificate (${a.reason})`,
    );
  }
  const outcomes: IdentityOutcome[] = allOf(node)
    .filter((a): a is Usable => a.state === 'usable')
    .map(kept);

  // 1. The kubelet, with the bootstrap credential (or its own, still valid one).
  let kubelet = node.kubelet;
  let usedBootstrap: BootstrapKubeconfig | null = null;
  if (kubelet.state !== 'usable') {
    const first = await issueKubelet(pass);
    usedBootstrap = first.bootstrap;
    outcomes.unshift(issuedOutcome(first.issued, kubelet));
    kubelet = await assessIdentity(kubelet.identity, deps.clock.now(), null, pass.store);
  }
  if (!isNodeCredential(kubelet))
    throw new KubebootError(
      `the kubelet credential is not usable after bootstrap (${kubelet.state === 'unusable' ? kubelet.reason : 'no cluster'})`,
    );

  // 2. The other identities, requested by the node itself: the kubelet never
  //    waits for them, and an approver sees which node asked.
  const missing = options.onlyKubelet ? [] : node.others.filter((a) => a.state !== 'usable');
  outcomes.push(...(await issueByNode(pass, kubelet, missing)));

  // 3. Every identity proven: the token goes. A kubelet credential that was
  //    only kept, not issued now, is shown to the API server first.
  const everyone = outcomes.length === identitiesFor(config).length;
  const deleted = everyone ? await deleteBootstrap(pass, usedBootstrap ? null : kubelet) : false;
  return { outcomes, usedBootstrap, bootstrapKubeconfigDeleted: deleted };
}

/**
 * `kubeboot renew` without a daemon: every identity (or `only`) renewed with
 * the node's kubelet credential, each finished before the next; a node with
 * no usable kubelet credential is bootstrapped instead.
 */
export async function renewNode(pass: Pass, only: string | null): Promise<void> {
  const { config, deps, node } = pass;
  if (!isNodeCredential(node.kubelet)) {
    deps.logger.info(
      `no daemon running and the kubelet credential is not usable (${node.kubelet.state === 'unusable' ? node.kubelet.reason : 'no cluster'}); bootstrapping instead`,
    );
    await bootstrapNode(pass);
    return;
  }
  for (const own of allOf(node).filter((a) => only === null || a.identity.name === only)) {
    await renewIdentity(config, own, node.kubelet, deps);
    await finishRenewal(pass.config, own.identity, pass.deps);
  }
}

/** The kubelet's credential, asked for with the bootstrap credential. */
export async function issueKubelet(pass: Pass): Promise<{ issued: Issued; bootstrap: BootstrapKubeconfig }> {
  const kubelet = pass.node.kubelet;
  const source = await askingForKubelet(pass, kubelet.state === 'unusable' ? kubelet.reason : 'valid');
  try {
    return { issued: await issueCredential(kubelet.identity, issueContext(pass.config, source, pass.deps)), bootstrap: source.bootstrap };
  } catch (err) {
    const explained = explainBootstrapFailure(err, source.bootstrap);
    if (explained instanceof DeadTokenError && pass.found?.kind === 'kubeconfig' && pass.found.joined)
      throw await forgetJoin(pass, explained);
    throw explained;
  } finally {
    await source.client.close();
  }
}

/**
 * A dead token's kubeconfig that this pass's join wrote goes again (its token
 * file, if any, stays): the join settings it was made from are still given,
 * so nothing is lost, and left behind it would shadow them — the next run
 * would use it instead of a new --token. A kubeconfig the operator placed is
 * kept (explainBootstrapFailure).
 */
async function forgetJoin(pass: Pass, dead: DeadTokenError): Promise<DeadTokenError> {
  await pass.store.remove(pass.config.bootstrapKubeconfig);
  pass.found = { kind: 'absent' };
  return new DeadTokenError(
    dead.message.replace(
      / and replace this file$/,
      ` and join with it (${pass.config.bootstrapKubeconfig}, written from the join settings moments ago, is removed again)`,
    ),
  );
}

/**
 * Once every identity is proven: the bootstrap kubeconfig (and a token file
 * it names) goes, as this pass found it. `unproven` is a kubelet credential
 * that was kept rather than issued by this pass. Returns whether one was
 * there and is now gone.
 */
export async function deleteBootstrap(pass: Pass, unproven: NodeCredential | null): Promise<boolean> {
  const found = await bootstrapOf(pass);
  return finishBootstrap(pass.config, found.kind === 'absent' ? null : found, pass.deps, unproven);
}

/** The daemon, after a wake-up that left every identity valid: the bootstrap kubeconfig as it is now goes. */
export async function deleteBootstrapNow(config: Config, deps: RunDeps, unproven: NodeCredential | null): Promise<boolean> {
  const found = await findBootstrap(config, storeOf(deps).read);
  return finishBootstrap(config, found.kind === 'absent' ? null : found, deps, unproven);
}

/**
 * Who asks for the kubelet's certificate when it has no usable one of its
 * own, decided here and nowhere else: the bootstrap kubeconfig, as read once
 * or as the join in openPass wrote it (kept in memory). `why` says why the
 * kubelet cannot ask itself, for the error when there is none.
 */
async function askingForKubelet(pass: Pass, why: string): Promise<Requester & { bootstrap: BootstrapKubeconfig }> {
  const { config, deps } = pass;
  const found = await bootstrapOf(pass);
  if (found.kind === 'invalid') throw found.error;
  if (found.kind === 'absent') {
    throw new BootstrapCredentialError(
      `${config.bootstrapKubeconfig}: not found, and the kubelet has no usable credential to request certificates with (${why}); place a bootstrap kubeconfig there`,
    );
  }
  const { bootstrap } = found;
  // A join's CA was pinned by its discovery: trusted as it is, not pinned again.
  const cluster = found.joined
    ? { server: bootstrap.server, tlsServerName: bootstrap.tlsServerName, caPem: bootstrap.caPem as string }
    : await clusterOf(bootstrap, config, deps, async ({ caPem, signed }) => {
        await seedFloor({ store: pass.store, stateDir: config.stateDir, logger: deps.logger, caPem, signed, now: deps.clock.now() });
      });
  return bootstrapRequester(bootstrap, cluster, deps.dispatcher);
}

/** The bootstrap kubeconfig, read and parsed at most once per pass. */
async function bootstrapOf(pass: Pass): Promise<FoundBootstrap> {
  pass.found ??= await findBootstrap(pass.config, pass.store.read);
  return pass.found;
}

/** Reads and parses the bootstrap kubeconfig; an error reading it (not its absence) is thrown. */
export async function findBootstrap(config: Config, read: ReadFile): Promise<FoundBootstrap> {
  const text = await read(config.bootstrapKubeconfig);
  if (text === null) return { kind: 'absent' };
  try {
    return { kind: 'kubeconfig', bootstrap: await parseBootstrapKubeconfig(config.bootstrapKubeconfig, text, read) };
  } catch (err) {
    return { kind: 'invalid', error: err as Error };
  }
}

/** Every identity in `missing`, at once, asked for with the node's kubelet credential; the first failure is thrown, the others logged. */
async function issueByNode(pass: Pass, node: NodeCredential, missing: Assessment[]): Promise<IdentityOutcome[]> {
  if (missing.length === 0) return [];
  const { config, deps } = pass;
  const source = nodeRequester(node, deps.dispatcher);
  try {
    const results = await Promise.allSettled(missing.map((a) => issueCredential(a.identity, issueContext(config, source, deps))));
    const failures = results.flatMap((r, i) =>
      r.status === 'rejected' ? [{ identity: missing[i]!.identity.name, error: r.reason as Error }] : [],
    );
    for (const f of failures.slice(1)) deps.logger.error(`${f.identity}: ${f.error.message}`);
    if (failures[0]) throw failures[0].error;
    return results.map((r, i) => issuedOutcome((r as PromiseFulfilledResult<Issued>).value, missing[i]!));
  } finally {
    await source.client.close();
  }
}

function kept(a: Usable): IdentityOutcome {
  return { identity: a.identity.name, action: 'kept', notAfter: a.notAfter };
}

function issuedOutcome(issued: Issued, a: Assessment): IdentityOutcome {
  return { identity: a.identity.name, action: 'issued', notAfter: issued.notAfter, issued };
}
