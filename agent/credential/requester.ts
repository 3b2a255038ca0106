/**
 * Who authenticates a CSR: the bootstrap kubeconfig's credential (a node
 * without a usable kubelet credential), or the node's own kubelet
 * certificate (renewals, and every identity after the kubelet's).
 */
import type { Dispatcher } from 'undici';
import type { Config } from '../config/types.js';
import { ApiError, BootstrapCredentialError, DeadTokenError, InputError } from '../errors.js';
import { KubeClient } from '../kube/client.js';
import { discoverClusterCa, type DiscoveryInput } from '../kube/discovery.js';
import type { BootstrapKubeconfig } from '../kubeconfig/parse.js';
import type { Logger } from '../log.js';
import { parseCertificateChain } from '../pki/certificate.js';
import { pinnedCertificates } from '../pki/pin.js';
import type { Clock } from '../time/clock.js';
import type { Cluster, NodeCredential } from './assess.js';

export interface Requester {
  client: KubeClient;
  cluster: Cluster;
  /** Set when the bootstrap kubeconfig authenticates; it is deleted once every identity is proven. */
  bootstrap: BootstrapKubeconfig | null;
}

/** The node's kubelet certificate asks: the approver sees which node wants what. */
export function nodeRequester(node: NodeCredential, dispatcher?: Dispatcher): Requester {
  return {
    client: new KubeClient(node.cluster, { kind: 'client-certificate', certPem: node.certPem, keyPem: node.keyPem }, dispatcher),
    cluster: node.cluster,
    bootstrap: null,
  };
}

/**
 * The bootstrap kubeconfig's credential against its cluster (clusterOf): the
 * only way a node without a kubelet credential can ask. Which bootstrap
 * kubeconfig, and when, the pass decides (bootstrap/pass.ts).
 */
export function bootstrapRequester(
  bootstrap: BootstrapKubeconfig,
  cluster: Cluster,
  dispatcher?: Dispatcher,
): Requester & { bootstrap: BootstrapKubeconfig } {
  const credential =
    bootstrap.auth.kind === 'client-certificate'
      ? ({ kind: 'client-certificate', certPem: bootstrap.auth.certPem, keyPem: bootstrap.auth.keyPem } as const)
      : ({ kind: 'token', token: bootstrap.auth.token } as const);
  return { client: new KubeClient(cluster, credential, dispatcher), cluster, bootstrap };
}

/**
 * Server and CA for a bootstrap kubeconfig: its own CA (checked against any pins), or pinned discovery.
 * With `onVerified` (a join, not a check), discovery hands on what its verified fetch trusted (the bootstrap pass starts the node's trust statement floor there).
 */
export async function clusterOf(
  bootstrap: BootstrapKubeconfig,
  config: Config,
  deps: { logger: Logger; signal?: AbortSignal; dispatcher?: Dispatcher; clock?: Clock },
  onVerified?: DiscoveryInput['onVerified'],
): Promise<Cluster> {
  const base = { server: bootstrap.server, tlsServerName: bootstrap.tlsServerName };
  if (bootstrap.insecureSkipTlsVerify && !config.unsafeAllowInsecureBootstrap) {
    throw new InputError(
      bootstrap.file,
      'insecure-skip-tls-verify',
      'refused: TLS verification must stay on (pass --unsafe-allow-insecure-bootstrap to accept it, or give --ca-cert-hash)',
    );
  }
  if (bootstrap.caPem && !bootstrap.insecureSkipTlsVerify) {
    // A CA that only looks like PEM would fail every TLS handshake with a vaguer error.
    try {
      parseCertificateChain(bootstrap.caPem);
    } catch (err) {
      throw new InputError(bootstrap.file, 'certificate-authority', `does not hold a valid certificate (${(err as Error).message})`);
    }
    if (config.caCertHashes.length === 0) return { ...base, caPem: bootstrap.caPem };
    // With pins, only the pinned certificates are trusted, as for discovery.
    const { pinned, count } = pinnedCertificates(bootstrap.caPem, config.caCertHashes);
    if (count === 0) throw new InputError(bootstrap.file, 'certificate-authority', 'the CA matches none of the --ca-cert-hash pins');
    return { ...base, caPem: pinned };
  }
  if (bootstrap.auth.kind !== 'bootstrap-token') {
    throw new InputError(
      bootstrap.file,
      'certificate-authority',
      'missing; CA discovery through cluster-info needs a bootstrap token, so give the CA here',
    );
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
    signal: deps.signal,
    clock: deps.clock,
    dispatcher: deps.dispatcher,
    ...(onVerified ? { onVerified } : {}),
  });
  return { ...base, caPem };
}

/**
 * A 401 while using the bootstrap credential is the operator's input to fix,
 * not a transient failure. A bootstrap token refused is dead (exit 5, as when
 * discovery finds no signature for it); another credential is bad input (2).
 * The file stays (see pass.ts issueKubelet for the one a join wrote): a 401 is
 * what the API server says now, not a proof for good (it reads tokens from an
 * informer's cache that trails a new Secret, and a token can be re-created
 * with the same id and secret), and it may be the node's only copy.
 */
export function explainBootstrapFailure(err: unknown, bootstrap: BootstrapKubeconfig | null): unknown {
  if (!bootstrap || !(err instanceof ApiError) || err.status !== 401) return err;
  if (bootstrap.auth.kind === 'bootstrap-token') {
    return new DeadTokenError(
      `${bootstrap.file}: the API server refuses bootstrap token ${bootstrap.auth.tokenId} (401 Unauthorized): the token is dead (deleted, expired or mistyped); make a new one (kubeboot token create, or kubeadm token create) and replace this file`,
    );
  }
  return new BootstrapCredentialError(
    `${bootstrap.file}: the API server rejected the bootstrap credential (401 Unauthorized): it is expired, deleted or mistyped; create a new one and replace this file`,
  );
}
