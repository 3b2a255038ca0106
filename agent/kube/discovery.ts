/**
 * CA discovery through kube-public/cluster-info, as `kubeadm join` does it:
 * the first fetch is unverified TLS (we do not know the CA yet), so nothing
 * from it is trusted until (1) the detached JWS made with our bootstrap token
 * verifies, and (2) the CA it names matches an operator-supplied pin. Then the
 * same object is fetched again over TLS verified against that CA and must be
 * identical. The bootstrap token is never sent during discovery.
 */
import type { Dispatcher } from 'undici';
import { KubebootError, ExitCode } from '../errors.js';
import { parseYaml } from '../config/yaml.js';
import type { Logger } from '../log.js';
import { verifyDetachedJws } from '../pki/jws.js';
import { pinnedCertificates } from '../pki/pin.js';
import { systemClock, type Clock } from '../time/clock.js';
import { pause } from '../time/timer.js';
import { KubeClient } from './client.js';

export const CLUSTER_INFO = '/api/v1/namespaces/kube-public/configmaps/cluster-info';
/** cluster-info is a kubeconfig and a few signatures; it arrives over unverified TLS, so anyone on the path could send more. */
export const CLUSTER_INFO_MAX_BYTES = 1 << 20;

export interface DiscoveryInput {
  server: string;
  tlsServerName: string | null;
  tokenId: string;
  tokenSecret: string;
  /** `sha256:<hex>` pins; empty only with unsafeSkipCaVerification. */
  pins: string[];
  unsafeSkipCaVerification: boolean;
  timeoutMs: number;
  logger: Logger;
  signal?: AbortSignal;
  /** The overall bound and the pause between attempts run on it. */
  clock?: Clock;
  /** Every API connection goes through it; unset, each client makes its own TLS agent. */
  dispatcher?: Dispatcher;
}

interface ConfigMap {
  data?: Record<string, string>;
}

/** Returns the cluster CA bundle (PEM) proven by token signature and pin. */
export async function discoverClusterCa(input: DiscoveryInput): Promise<string> {
  if (input.pins.length === 0 && !input.unsafeSkipCaVerification) {
    throw new KubebootError(
      'the bootstrap kubeconfig has no certificate authority and no --ca-cert-hash was given; refusing to trust an unverified CA (pass --unsafe-skip-ca-verification to accept it anyway)',
      ExitCode.badInput,
    );
  }
  const clock = input.clock ?? systemClock;
  const deadline = clock.monotonic() + input.timeoutMs;
  // Deliberately unverified: the JWS and the pin below are what make this safe.
  const unverified = new KubeClient(
    { server: input.server, caPem: null, tlsServerName: input.tlsServerName, unsafeSkipTlsVerify: true },
    { kind: 'anonymous' },
    input.dispatcher,
  );
  try {
    for (;;) {
      const outcome = await tryDiscovery(unverified, input);
      if (outcome.ca) {
        await confirmOverVerifiedTls(input, outcome.ca, outcome.kubeconfig);
        return outcome.ca;
      }
      if (clock.monotonic() + 5_000 > deadline) {
        throw new KubebootError(
          `CA discovery from ${input.server}: ${outcome.waitingFor}; gave up after ${Math.round(input.timeoutMs / 1000)}s`,
          ExitCode.timedOut,
        );
      }
      input.logger.info(`CA discovery: ${outcome.waitingFor}; retrying in 5s`);
      await pause(5_000, clock, input.signal);
    }
  } finally {
    await unverified.close();
  }
}

type Attempt = { ca: string; kubeconfig: string; waitingFor?: never } | { ca?: never; kubeconfig?: never; waitingFor: string };

async function tryDiscovery(client: KubeClient, input: DiscoveryInput): Promise<Attempt> {
  let configMap: ConfigMap;
  try {
    configMap = (
      await client.request<ConfigMap>('GET', CLUSTER_INFO, {
        maxBodyBytes: CLUSTER_INFO_MAX_BYTES,
        ...(input.signal ? { signal: input.signal } : {}),
      })
    ).body;
  } catch (err) {
    return { waitingFor: `cannot read kube-public/cluster-info (${(err as Error).message})` };
  }
  const kubeconfig = configMap.data?.kubeconfig;
  if (!kubeconfig) return { waitingFor: 'kube-public/cluster-info has no kubeconfig' };
  const jws = configMap.data?.[`jws-kubeconfig-${input.tokenId}`];
  if (!jws)
    return { waitingFor: `kube-public/cluster-info is not yet signed for token ${input.tokenId} (the bootstrapsigner controller adds it)` };
  if (!verifyDetachedJws(jws, kubeconfig, input.tokenId, input.tokenSecret)) {
    throw new KubebootError(
      `kube-public/cluster-info at ${input.server}: signature for token ${input.tokenId} does not verify; refusing its CA`,
      ExitCode.other,
    );
  }
  const bundle = caFromClusterInfo(kubeconfig);
  if (input.pins.length === 0) return { ca: bundle, kubeconfig }; // --unsafe-skip-ca-verification
  const { pinned, count, dropped } = pinnedCertificates(bundle, input.pins);
  if (count === 0) {
    throw new KubebootError(
      `kube-public/cluster-info at ${input.server}: the cluster CA matches none of the --ca-cert-hash pins; refusing it`,
      ExitCode.other,
    );
  }
  if (dropped > 0)
    input.logger.warn(
      `kube-public/cluster-info carries ${dropped} CA block(s) matching no --ca-cert-hash pin; only the ${count} pinned certificate(s) are trusted (pin each CA of a rotation)`,
    );
  return { ca: pinned, kubeconfig };
}

async function confirmOverVerifiedTls(input: DiscoveryInput, ca: string, expected: string): Promise<void> {
  const verified = new KubeClient(
    { server: input.server, caPem: ca, tlsServerName: input.tlsServerName },
    { kind: 'anonymous' },
    input.dispatcher,
  );
  try {
    const again = (
      await verified.request<ConfigMap>('GET', CLUSTER_INFO, {
        maxBodyBytes: CLUSTER_INFO_MAX_BYTES,
        ...(input.signal ? { signal: input.signal } : {}),
      })
    ).body;
    if (again.data?.kubeconfig !== expected) {
      throw new KubebootError(
        `kube-public/cluster-info at ${input.server} changed between the unverified and the verified fetch; refusing it`,
      );
    }
  } finally {
    await verified.close();
  }
}

export function caFromClusterInfo(kubeconfig: string): string {
  let doc: { clusters?: { cluster?: { 'certificate-authority-data'?: string } }[] };
  try {
    // The operator-file parser: bounded nesting and aliases, errors without content.
    doc = parseYaml('kube-public/cluster-info', kubeconfig) as typeof doc;
  } catch (err) {
    throw new KubebootError(`${(err as Error).message}`);
  }
  const data = doc?.clusters?.[0]?.cluster?.['certificate-authority-data'];
  if (!data) throw new KubebootError('kube-public/cluster-info: kubeconfig has no certificate-authority-data');
  return Buffer.from(data, 'base64').toString('utf8');
}
