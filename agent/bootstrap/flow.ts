/**
 * The bootstrap of a node, top to bottom:
 * recover half-done swaps → keep what is still usable → find who may ask
 * (bootstrap token, or the kubelet's own certificate) and the cluster CA →
 * issue every missing identity (the kubelet never waits for kube-proxy) →
 * only when all are proven, delete the bootstrap kubeconfig.
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
import type { WriteObserver } from '../store/atomic.js';
import { recoverStore } from '../store/cert-store.js';
import { existingCredential, readOptional, type ExistingCredential } from './existing.js';
import { issueCredential, type Issued } from './issue.js';
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
  bootstrapKubeconfigDeleted: boolean;
}

export async function bootstrapNode(config: Config, deps: FlowDeps): Promise<BootstrapReport> {
  const identities = identitiesFor(config);
  for (const identity of identities) {
    for (const line of await recoverStore(identity, deps.observer ? { observer: deps.observer } : {})) deps.logger.warn(`${identity.name}: ${line}`);
  }
  const existing = await assessAll(identities, deps.now());
  const missing = existing.filter((e) => !e.usable);
  for (const e of existing) {
    deps.logger.info(e.usable ? `${e.identity.name}: credential valid until ${e.notAfter?.toISOString()}; keeping it` : `${e.identity.name}: needs a certificate (${e.reason})`);
  }
  if (missing.length === 0) return { outcomes: existing.map(kept), bootstrapKubeconfigDeleted: false };

  const source = await requesterFor(config, existing[0]!, deps);
  const outcomes: IdentityOutcome[] = existing.filter((e) => e.usable).map(kept);
  try {
    const results = await Promise.allSettled(
      missing.map((e) =>
        issueCredential(e.identity, {
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
          ...(deps.onCsrWait ? { onCsrWait: (s: number) => deps.onCsrWait!(e.identity, s) } : {}),
        }),
      ),
    );
    const failures: unknown[] = [];
    results.forEach((result, i) => {
      const identity = missing[i]!.identity;
      if (result.status === 'fulfilled') outcomes.push({ identity: identity.name, action: 'issued', notAfter: result.value.notAfter, issued: result.value });
      else {
        failures.push(result.reason);
        if (failures.length > 1 || i > 0) deps.logger.error(`${identity.name}: ${(result.reason as Error).message}`);
      }
    });
    if (failures.length > 0) throw explain(failures[0], source.bootstrap);
  } finally {
    await source.client.close();
  }

  let deleted = false;
  if (source.bootstrap) {
    await removeBootstrapToken(source.bootstrap, config.cloudInitPaths, deps.logger, deps.observer);
    deleted = true;
  }
  return { outcomes, bootstrapKubeconfigDeleted: deleted };
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

/**
 * The bootstrap kubeconfig when there is one; otherwise the kubelet's own
 * valid certificate (a node may request its other identities itself).
 */
export async function requesterFor(config: Config, kubelet: ExistingCredential, deps: FlowDeps): Promise<Requester> {
  const text = await readOptional(config.bootstrapKubeconfig);
  if (text === null) {
    if (kubelet.usable && kubelet.cluster && kubelet.certPem && kubelet.keyPem) {
      return {
        client: new KubeClient(kubelet.cluster, { kind: 'client-certificate', certPem: kubelet.certPem, keyPem: kubelet.keyPem }),
        cluster: kubelet.cluster,
        bootstrap: null,
      };
    }
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

async function clusterOf(bootstrap: BootstrapKubeconfig, config: Config, deps: FlowDeps): Promise<Endpoint & { caPem: string }> {
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
    unsafeSkipCaVerification: config.unsafeSkipCaVerification || bootstrap.insecureSkipTlsVerify,
    timeoutMs: config.waitTimeout * 1000,
    logger: deps.logger,
    ...(deps.signal ? { signal: deps.signal } : {}),
  });
  return { ...base, caPem };
}
