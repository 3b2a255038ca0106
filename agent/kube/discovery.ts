/**
 * CA discovery through kube-public/cluster-info, as `kubeadm join` does it:
 * the first fetch is unverified TLS (we do not know the CA yet), so nothing
 * from it is trusted until (1) the detached JWS made with our bootstrap token
 * verifies, and (2) the CA it names matches an operator-supplied pin. Then the
 * same object is fetched again over TLS verified against that CA and must be
 * identical. The requests are kubeadm's (cmd/kubeadm/app/discovery/token):
 * anonymous GETs every 5 s.
 *
 * Unlike kubeadm, a wait for a signature that is not coming is cut short.
 * While cluster-info lacks the token's signature, kubeboot asks the API
 * server whether the token authenticates (a SelfSubjectReview), over TLS
 * verified against a CA the operator pinned — where the CSR would send the
 * token anyway; without a pin it asks nothing. A token refused for
 * REFUSED_GRACE_MS, or no signature after SIGNATURE_WAIT_MS, ends discovery
 * with exit 5 (ExitCode.tokenNotSigned).
 */
import type { Dispatcher } from 'undici';
import { ApiError, ExitCode, KubebootError, UnreachableError } from '../errors.js';
import { parseYaml } from '../config/yaml.js';
import type { Logger } from '../log.js';
import { verifyDetachedJws } from '../pki/jws.js';
import { pinnedCertificates } from '../pki/pin.js';
import { systemClock, type Clock } from '../time/clock.js';
import { pause } from '../time/timer.js';
import { KubeClient } from './client.js';
import { STATEMENT_JWS_KEY, STATEMENT_KEY } from './cluster-info-digest.js';
import { whoAmI } from './whoami.js';

export const CLUSTER_INFO = '/api/v1/namespaces/kube-public/configmaps/cluster-info';
/** cluster-info is a kubeconfig and a few signatures; it arrives over unverified TLS, so anyone on the path could send more. */
export const CLUSTER_INFO_MAX_BYTES = 1 << 20;
/** Between attempts: kubeadm's DiscoveryRetryInterval. */
export const RETRY_MS = 5_000;
/**
 * The longest cluster-info may lack the token's signature. The bootstrapsigner
 * re-signs on every Secret event: measured against kube-apiserver and
 * kube-controller-manager 1.34, a new token was signed within 200 ms and a
 * deleted one's signature gone within 30 ms. Two minutes leave room for a busy
 * controller manager. kubeadm waits its whole discovery timeout (5 min), then
 * says the same: the token is invalid or expired, create a new one.
 */
export const SIGNATURE_WAIT_MS = 2 * 60_000;
/**
 * How long the API server may refuse the token before it is believed: it
 * authenticates bootstrap tokens from an informer's cache of Secrets, which
 * trails a new Secret (measured: a new token authenticated at the first try,
 * ~20 ms after its POST, on an idle 1.34 apiserver; a loaded one lags more).
 * kube-apiserver caches no failure (its token failure cache TTL is 0), so an
 * early 401 does not stick; it caches a success for 10 s, so a token used just
 * before it was deleted still authenticates that long.
 */
export const REFUSED_GRACE_MS = 15_000;

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
  /**
   * Given the CA trusted from now on and the trust statement cluster-info carried on the
   * verified fetch (trust/statement.ts): a new node's version floor starts there (trust/floor.ts).
   */
  onVerified?: (found: { caPem: string; signed: { payload: string | null; jws: string | null } }) => Promise<void>;
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
    let unsigned: UnsignedWait | null = null;
    for (;;) {
      const outcome = await tryDiscovery(unverified, input);
      if (outcome.ca) {
        const verified = await confirmOverVerifiedTls(input, outcome.ca, outcome.kubeconfig);
        await input.onVerified?.({
          caPem: outcome.ca,
          signed: { payload: verified.data?.[STATEMENT_KEY] ?? null, jws: verified.data?.[STATEMENT_JWS_KEY] ?? null },
        });
        return outcome.ca;
      }
      let waitingFor = outcome.waitingFor;
      const now = clock.monotonic();
      if (outcome.unsigned !== undefined) {
        const probe = await probeToken(input, outcome.unsigned);
        unsigned = observeUnsigned(unsigned, probe, now);
        const verdict = signatureVerdict(unsigned, now, deadline);
        if (verdict !== null) throw tokenNotSigned(input, unsigned, verdict, now);
        if (probe !== 'unknown') waitingFor += `; ${input.server} ${probe === 'refused' ? 'refuses the token (401)' : 'accepts the token'}`;
      }
      if (now + RETRY_MS > deadline) {
        throw new UnreachableError(
          `CA discovery from ${input.server}: ${waitingFor}; gave up after ${Math.round(input.timeoutMs / 1000)}s`,
        );
      }
      input.logger.info(`CA discovery: ${waitingFor}; retrying in ${RETRY_MS / 1000}s`);
      await pause(RETRY_MS, clock, input.signal);
    }
  } finally {
    await unverified.close();
  }
}

/** `unsigned`: cluster-info's kubeconfig, read without the token's signature. */
type Attempt =
  | { ca: string; kubeconfig: string; waitingFor?: never; unsigned?: never }
  | { ca?: never; kubeconfig?: never; waitingFor: string; unsigned?: string };

/** What the API server said of the token: `unknown` when it was not asked (no pin) or gave no answer. */
type TokenProbe = 'authenticates' | 'refused' | 'unknown';

/** What discovery has seen while cluster-info lacked the token's signature (monotonic ms). */
interface UnsignedWait {
  /** First seen without the signature. */
  since: number;
  /** Refused (401) at every probe since then; null once a probe was not refused. */
  refusedSince: number | null;
  /** Some probe authenticated it: the token lives, only its signature is missing. */
  authenticated: boolean;
}

function observeUnsigned(wait: UnsignedWait | null, probe: TokenProbe, now: number): UnsignedWait {
  const refusedSince = wait?.refusedSince ?? null;
  return {
    since: wait?.since ?? now,
    refusedSince: probe === 'refused' ? (refusedSince ?? now) : probe === 'authenticates' ? null : refusedSince,
    authenticated: (wait?.authenticated ?? false) || probe === 'authenticates',
  };
}

/** Null: keep waiting. Otherwise why no signature is coming: the token is refused, or the wait is over. */
function signatureVerdict(wait: UnsignedWait, now: number, deadline: number): 'refused' | 'unsigned' | null {
  if (wait.refusedSince !== null && now - wait.refusedSince >= REFUSED_GRACE_MS) return 'refused';
  if (now + RETRY_MS > Math.min(wait.since + SIGNATURE_WAIT_MS, deadline)) return 'unsigned';
  return null;
}

const NEW_TOKEN =
  'make a new token (kubeboot token create, or kubeboot join-command --create-token for the whole join line) and join with it';

/** One line naming the token by its id only; the secret stays out of every message. */
function tokenNotSigned(input: DiscoveryInput, wait: UnsignedWait, verdict: 'refused' | 'unsigned', now: number): KubebootError {
  const waited = `${Math.round((now - wait.since) / 1000)}s`;
  const why =
    verdict === 'refused'
      ? `: deleted, expired or mistyped (${input.server} refuses it: 401 Unauthorized)`
      : wait.authenticated
        ? ` after ${waited}, though ${input.server} accepts the token: it was made without usage-bootstrap-signing, or the bootstrapsigner controller of kube-controller-manager is not running`
        : `: deleted, expired or mistyped (none after ${waited})`;
  return new KubebootError(
    `no signature for token ${input.tokenId} in kube-public/cluster-info${why}; ${NEW_TOKEN}`,
    ExitCode.tokenNotSigned,
  );
}

/**
 * Whether the API server accepts the token, asked over TLS verified against
 * the CAs of the unsigned cluster-info that a pin names: the token goes only
 * where the CSR would send it. Any answer but 401 means it authenticated
 * (authorization and routing come after authentication).
 */
async function probeToken(input: DiscoveryInput, kubeconfig: string): Promise<TokenProbe> {
  if (input.pins.length === 0) return 'unknown';
  let pinned: string;
  try {
    const found = pinnedCertificates(caFromClusterInfo(kubeconfig), input.pins);
    if (found.count === 0) return 'unknown';
    pinned = found.pinned;
  } catch {
    return 'unknown';
  }
  const client = new KubeClient(
    { server: input.server, caPem: pinned, tlsServerName: input.tlsServerName },
    { kind: 'token', token: `${input.tokenId}.${input.tokenSecret}` },
    input.dispatcher,
  );
  try {
    await whoAmI(client, input.signal);
    return 'authenticates';
  } catch (err) {
    if (!(err instanceof ApiError) || err.status >= 500) return 'unknown';
    return err.status === 401 ? 'refused' : 'authenticates';
  } finally {
    await client.close();
  }
}

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
    return {
      waitingFor: `kube-public/cluster-info is not yet signed for token ${input.tokenId} (the bootstrapsigner controller adds it)`,
      unsigned: kubeconfig,
    };
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

async function confirmOverVerifiedTls(input: DiscoveryInput, ca: string, expected: string): Promise<ConfigMap> {
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
    return again;
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
