/**
 * The bootstrap of a node, top to bottom:
 * recover half-done swaps → keep what is still usable → the kubelet's
 * credential with the bootstrap token (CA from the kubeconfig or pinned
 * discovery) → the other identities, requested by the node itself (the
 * kubelet never waits for them) → only when all are proven, delete the
 * bootstrap kubeconfig.
 */
import type { Config } from '../config/types.js';
import { ExitCode, InputError, KubebootError } from '../errors.js';
import { identitiesFor } from '../identities.js';
import type { Identity } from '../identity.js';
import type { Logger } from '../log.js';
import { ApiError, KubeClient, type Endpoint } from '../kube/client.js';
import { discoverClusterCa } from '../kube/discovery.js';
import { parseBootstrapKubeconfig, type BootstrapKubeconfig } from '../kubeconfig/parse.js';
import { matchesAnyPin } from '../pki/pin.js';
import { removeFileDurably, type WriteObserver } from '../store/atomic.js';
import { recoverStore } from '../store/cert-store.js';
import { existingCredential, type ExistingCredential } from './existing.js';
import { readOptional } from '../read-optional.js';
import { issueCredential, type IssueContext, type Issued } from './issue.js';
import { removeBootstrapToken } from './cleanup.js';

export interface FlowDeps {
  logger: Logger;
  now: () => Date;
  signal?: AbortSignal;
  observer?: WriteObserver;
  onCsrWait?: (identity: Identity, seconds: number) => void;
}

export interface IdentityOutcome {
  identity: string;
  action: 'kept' | 'issued';
  notAfter: Date | null;
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

export async function bootstrapNode(config: Config, deps: FlowDeps, options: BootstrapOptions = {}): Promise<BootstrapReport> {
  const identities = identitiesFor(config);
  for (const identity of identities) {
    for (const line of await recoverStore(identity, deps.observer ? { observer: deps.observer } : {})) deps.logger.warn(`${identity.name}: ${line}`);
  }
  const existing = await assessAll(identities, deps.now());
  for (const e of existing) {
    deps.logger.info(e.usable ? `${e.identity.name}: credential valid until ${e.notAfter?.toISOString()}; keeping it` : `${e.identity.name}: needs a certificate (${e.reason})`);
  }
  const [kubeletState, ...others] = existing as [ExistingCredential, ...ExistingCredential[]];
  const outcomes: IdentityOutcome[] = existing.filter((e) => e.usable).map(kept);
  if (outcomes.length === existing.length) return { outcomes, usedBootstrap: null, bootstrapKubeconfigDeleted: false };

  // 1. The kubelet, with the bootstrap credential (or its own, still valid one).
  let node = kubeletState;
  let usedBootstrap: BootstrapKubeconfig | null = null;
  if (!kubeletState.usable) {
    const source = await requesterFor(config, kubeletState, deps);
    usedBootstrap = source.bootstrap;
    try {
      const issued = await issueCredential(kubeletState.identity, issueContext(config, deps, source, kubeletState.identity));
      outcomes.unshift({ identity: 'kubelet', action: 'issued', notAfter: issued.notAfter, issued });
    } catch (err) {
      throw explain(err, source.bootstrap);
    } finally {
      await source.client.close();
    }
    node = await existingCredential(kubeletState.identity, deps.now(), null);
  }

  // 2. The other identities, requested by the node itself: the kubelet never
  //    waits for them, and an approver sees which node asked.
  const missing = options.onlyKubelet ? [] : others.filter((e) => !e.usable);
  if (missing.length > 0) {
    const source = nodeRequester(node);
    try {
      const results = await Promise.allSettled(missing.map((e) => issueCredential(e.identity, issueContext(config, deps, source, e.identity))));
      const failures: unknown[] = [];
      results.forEach((result, i) => {
        const identity = missing[i]!.identity;
        if (result.status === 'fulfilled') outcomes.push({ identity: identity.name, action: 'issued', notAfter: result.value.notAfter, issued: result.value });
        else {
          failures.push(result.reason);
          if (failures.length > 1) deps.logger.error(`${identity.name}: ${(result.reason as Error).message}`);
        }
      });
      if (failures.length > 0) throw failures[0];
    } finally {
      await source.client.close();
    }
  }

  // 3. Every identity proven: the token goes.
  const deleted = outcomes.length === existing.length ? await finishBootstrap(config, deps) : false;
  return { outcomes, usedBootstrap, bootstrapKubeconfigDeleted: deleted };
}

/**
 * Deletes the bootstrap kubeconfig (and a token file it names) once every
 * identity holds a proven credential. A file that no longer parses is
 * deleted all the same: it is no longer needed and may hold a token.
 */
export async function finishBootstrap(config: Config, deps: Pick<FlowDeps, 'logger' | 'observer'>): Promise<boolean> {
  const text = await readOptional(config.bootstrapKubeconfig);
  if (text === null) return false;
  let bootstrap: BootstrapKubeconfig;
  try {
    bootstrap = await parseBootstrapKubeconfig(config.bootstrapKubeconfig, text, readOptional);
  } catch {
    await removeFileDurably(config.bootstrapKubeconfig, deps.observer ? { observer: deps.observer } : {});
    deps.logger.info(`deleted the bootstrap kubeconfig ${config.bootstrapKubeconfig}`);
    return true;
  }
  await removeBootstrapToken(bootstrap, config.cloudInitPaths, deps.logger, deps.observer);
  return true;
}

function issueContext(config: Config, deps: FlowDeps, source: Requester, identity: Identity): IssueContext {
  return {
    cluster: source.cluster,
    requester: source.client,
    stateDir: config.stateDir,
    keyAlgorithm: config.keyAlgorithm,
    expirationSeconds: config.expirationSeconds,
    waitTimeoutMs: config.waitTimeout * 1000,
    pendingNoticeMs: config.pendingNoticeInterval * 1000,
    logger: deps.logger,
    now: deps.now,
    ...(deps.signal ? { signal: deps.signal } : {}),
    ...(deps.observer ? { observer: deps.observer } : {}),
    ...(deps.onCsrWait ? { onCsrWait: (s: number) => deps.onCsrWait!(identity, s) } : {}),
  };
}

function nodeRequester(node: ExistingCredential): Requester {
  if (!node.usable || !node.cluster || !node.certPem || !node.keyPem) {
    throw new KubebootError(`the kubelet credential is not usable after bootstrap (${node.reason})`);
  }
  return { client: new KubeClient(node.cluster, { kind: 'client-certificate', certPem: node.certPem, keyPem: node.keyPem }), cluster: node.cluster, bootstrap: null };
}

/** A 401 while using the bootstrap credential is the operator's input to fix, not a transient failure. */
function explain(err: unknown, bootstrap: BootstrapKubeconfig | null): unknown {
  if (bootstrap && err instanceof ApiError && err.status === 401) {
    return new KubebootError(
      `${bootstrap.file}: the API server rejected the bootstrap credential (401 Unauthorized): it is expired, deleted or mistyped; create a new one (for example kubeadm token create) and replace this file`,
      ExitCode.badInput,
    );
  }
  return err;
}

async function assessAll(identities: Identity[], now: Date): Promise<ExistingCredential[]> {
  const kubelet = await existingCredential(identities[0]!, now, null);
  const rest = await Promise.all(identities.slice(1).map((identity) => existingCredential(identity, now, kubelet.cluster?.caPem ?? null)));
  return [kubelet, ...rest];
}

function kept(e: ExistingCredential): IdentityOutcome {
  return { identity: e.identity.name, action: 'kept', notAfter: e.notAfter };
}

interface Requester {
  client: KubeClient;
  cluster: Endpoint & { caPem: string };
  /** Set when the bootstrap kubeconfig authenticates; it is deleted after success. */
  bootstrap: BootstrapKubeconfig | null;
}

/** The bootstrap kubeconfig's credential and cluster; the only way a node without a kubelet credential can ask. */
export async function requesterFor(config: Config, kubelet: ExistingCredential, deps: FlowDeps): Promise<Requester> {
  const text = await readOptional(config.bootstrapKubeconfig);
  if (text === null) {
    throw new KubebootError(
      `${config.bootstrapKubeconfig}: not found, and the kubelet has no usable credential to request certificates with (${kubelet.reason}); place a bootstrap kubeconfig there`,
      ExitCode.badInput,
    );
  }
  const bootstrap = await parseBootstrapKubeconfig(config.bootstrapKubeconfig, text, readOptional);
  const cluster = await clusterOf(bootstrap, config, deps);
  const credential =
    bootstrap.auth.kind === 'client-certificate'
      ? ({ kind: 'client-certificate', certPem: bootstrap.auth.certPem, keyPem: bootstrap.auth.keyPem } as const)
      : ({ kind: 'token', token: bootstrap.auth.token } as const);
  return { client: new KubeClient(cluster, credential), cluster, bootstrap };
}

/** Server and CA for a bootstrap kubeconfig: its own CA (checked against any pins), or pinned discovery. */
export async function clusterOf(bootstrap: BootstrapKubeconfig, config: Config, deps: FlowDeps): Promise<Endpoint & { caPem: string }> {
  const base = { server: bootstrap.server, tlsServerName: bootstrap.tlsServerName };
  if (bootstrap.insecureSkipTlsVerify && !config.unsafeAllowInsecureBootstrap) {
    throw new InputError(bootstrap.file, 'insecure-skip-tls-verify', 'refused: TLS verification must stay on (pass --unsafe-allow-insecure-bootstrap to accept it, or give --ca-cert-hash)');
  }
  if (bootstrap.caPem && !bootstrap.insecureSkipTlsVerify) {
    if (config.caCertHashes.length > 0 && !matchesAnyPin([bootstrap.caPem], config.caCertHashes)) {
      throw new InputError(bootstrap.file, 'certificate-authority', 'the CA matches none of the --ca-cert-hash pins');
    }
    return { ...base, caPem: bootstrap.caPem };
  }
  if (bootstrap.auth.kind !== 'bootstrap-token') {
    throw new InputError(bootstrap.file, 'certificate-authority', 'missing; CA discovery through cluster-info needs a bootstrap token, so give the CA here');
  }
  deps.logger.info(`discovering the cluster CA from ${bootstrap.server} (kube-public/cluster-info)`);
  const caPem = await discoverClusterCa({
    server: bootstrap.server,
    tlsServerName: bootstrap.tlsServerName,
    tokenId: bootstrap.auth.tokenId,
    tokenSecret: bootstrap.auth.tokenSecret,
    pins: config.caCertHashes,
    unsafeSkipCaVerification: config.unsafeSkipCaVerification,
    timeoutMs: config.waitTimeout * 1000,
    logger: deps.logger,
    ...(deps.signal ? { signal: deps.signal } : {}),
  });
  return { ...base, caPem };
}
