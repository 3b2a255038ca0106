/**
 * Obtains one identity's certificate from the API server and puts it on disk:
 * key (persisted before the CSR leaves) → CSR → wait → verify → prove → store
 * → kubeconfig. Used by first bootstrap and by renewal alike; only the client
 * that authenticates the CSR differs.
 */
import type { Dispatcher } from 'undici';
import type { Config } from '../config/types.js';
import { ApiError, CsrRejectedError, CsrUnusableError, IdentityMismatchError, KubebootError } from '../errors.js';
import { KUBELET_CLIENT_SIGNER, SHORT_LIVED_SECONDS, type Identity, type KeyAlgorithm } from '../identity.js';
import type { Logger } from '../log.js';
import { withFields } from '../log-lines.js';
import { KubeClient } from '../kube/client.js';
import { createCsr, waitForCertificate } from '../kube/csr-requests.js';
import { whoAmI } from '../kube/whoami.js';
import { checkIssuedCertificate, parseCertificateChain } from '../pki/certificate.js';
import { createCsrPem } from '../pki/pkcs10.js';
import { pemBlocks } from '../pki/pem.js';
import { answerChallenge, CHALLENGE_REASON, challengeIn } from '../tpm/challenge.js';
import { evidencePem, quoteCsr } from '../tpm/csr-evidence.js';
import { readTpmBeacon } from './tpm-beacon.js';
import type { Credential } from '../tpm/structures.js';
import { tpmLocationOf, withTpm, type TpmLocation } from '../tpm/identify.js';
import { csrName } from '../pki/csr-name.js';
import { generateKey, parsePrivateKey, type PrivateKey } from '../pki/keys.js';
import { renderIdentityKubeconfig } from '../kubeconfig/render.js';
import type { WriteObserver } from '../store/atomic.js';
import { retryTransient } from '../kube/retry.js';
import { splitCredential } from '../store/cert-store.js';
import { storeOf, type Store } from '../store/store.js';
import type { Clock } from '../time/clock.js';
import type { Cluster, Usable } from './assess.js';
import { compatibility } from './compatibility.js';
import type { Requester } from './requester.js';

/**
 * What every command that obtains credentials passes down: the one place
 * where bootstrap, renewal and the daemon meet the clock, the logger, the
 * stop signal and the write observer. Callbacks receive the identity, so one
 * value serves every identity.
 */
export interface RunDeps {
  logger: Logger;
  /** Every clock read and timer of the run: the CSR wait, retries, discovery, timestamps. */
  clock: Clock;
  signal?: AbortSignal;
  /** Told about kubeboot's own writes, so the file watcher ignores them. */
  observer?: WriteObserver;
  /** Where credentials, kubeconfigs and pending keys are kept; unset, the files on disk (tests pass an in-memory one). */
  store?: Store;
  /** The CSR is on the server under this name (a restart adopts it). */
  onCsrSubmitted?: (identity: Identity, csrName: string) => void;
  /** Seconds the CSR waited for its certificate. */
  onCsrWait?: (identity: Identity, seconds: number) => void;
  /** Every API connection of this run goes through it; unset, each client makes its own TLS agent. Tests inject undici's MockAgent. */
  dispatcher?: Dispatcher;
  /** Runs the switch-over with no other credential write in between (the daemon's CA rotation rewrites kubeconfigs too). */
  serialize?: <T>(fn: () => Promise<T>) => Promise<T>;
}

export interface IssueContext extends RunDeps {
  /** The cluster the new kubeconfig points at (server and CA). */
  cluster: Cluster;
  /** Authenticates the CSR: the bootstrap token, or the current certificate on renewal. */
  requester: KubeClient;
  stateDir: string;
  keyAlgorithm: KeyAlgorithm;
  expirationSeconds: number | null;
  /** On renewal with reuseKey, the current key; otherwise a fresh one is made. */
  reuseKeyPem: string | null;
  waitTimeoutMs: number;
  pendingNoticeMs: number;
  /** With a TPM (the `tpm` setting), every kubelet client CSR carries a quote by its AK; null: none. */
  tpm?: TpmLocation | null;
}

/** The one conversion from Config (seconds) to what issueCredential takes (milliseconds). */
export function issueContext(config: Config, requester: Requester, deps: RunDeps, reuseKeyPem: string | null = null): IssueContext {
  return {
    ...deps,
    cluster: requester.cluster,
    requester: requester.client,
    stateDir: config.stateDir,
    keyAlgorithm: config.keyAlgorithm,
    expirationSeconds: config.expirationSeconds,
    reuseKeyPem,
    waitTimeoutMs: config.waitTimeout * 1000,
    pendingNoticeMs: config.pendingNoticeInterval * 1000,
    tpm: tpmLocationOf(config.tpm),
  };
}

export interface Issued {
  csrName: string;
  certFile: string;
  currentPath: string;
  notAfter: Date;
  /** Seconds between the CSR being created and its certificate arriving. */
  waitedSeconds: number;
  /** Milliseconds from the certificate arriving to the files being on disk. */
  storeMillis: number;
  /**
   * The credential as stored, already checked as an assessment would check it
   * (chain to `cluster`'s CA, subject, usages, key): a step records it
   * without reading the files back.
   */
  stored: Usable;
}

/**
 * spec.expirationSeconds for an identity: the configured one, but at most a
 * day for those the node asks for with its own credential (kube-proxy,
 * serving), even when none is configured: they outlive a revocation of the
 * node by their lifetime, and kubeboot approver refuses longer ones (short-lived).
 */
export function requestedExpiration(identity: Pick<Identity, 'requester'>, configured: number | null): number | null {
  if (identity.requester !== 'node-credential') return configured;
  return Math.min(configured ?? SHORT_LIVED_SECONDS, SHORT_LIVED_SECONDS);
}

export async function issueCredential(identity: Identity, ctx: IssueContext): Promise<Issued> {
  const log = withFields(ctx.logger, { identity: identity.name });
  const store = storeOf(ctx);
  const waitStart = ctx.clock.monotonic();
  // One round of credential activation at most (tpm/challenge.ts): a second challenge is a refusal.
  let answer: Buffer | undefined;
  let requested: { key: PrivateKey; name: string; certPem: string };
  for (;;) {
    // The answering CSR needs a key of its own: the challenged CSR's name (a digest of its key) is spent.
    const key = await keyFor(identity, ctx, store, answer !== undefined);
    try {
      requested = { key, ...(await requestCertificate(identity, ctx, key, answer, log)) };
      break;
    } catch (err) {
      const blob = answer === undefined && ctx.tpm != null ? challengeOf(err) : null;
      if (blob === null) throw err;
      log.info(`${identity.name}: the approver challenges this TPM's AK (enrolment from the EK); answering it with credential activation`);
      answer = await withTpm(ctx.tpm!, (tpm) => answerChallenge(tpm, blob)).catch((cause: unknown) => {
        throw new CsrRejectedError(
          `${identity.name}: the TPM credential challenge the approver sent does not open with this TPM's EK and AK (${(cause as Error).message}); the next attempt files a new CSR`,
        );
      });
    }
  }
  const { key, name, certPem } = requested;
  const arrived = ctx.clock.monotonic();
  const waitedSeconds = (arrived - waitStart) / 1000;
  ctx.onCsrWait?.(identity, waitedSeconds);

  const problems = await checkIssuedCertificate({
    certPem,
    caPems: [ctx.cluster.caPem],
    publicKeyDer: key.publicKeyDer,
    subject: identity.subject,
    usages: identity.usages,
    now: checkTime(certPem, ctx.clock.now(), log),
    dnsNames: identity.dnsNames,
    ipAddresses: identity.ipAddresses,
  });
  if (problems.length > 0) {
    // A fresh key makes the next attempt a fresh CSR instead of re-adopting this one.
    await store.pendingKey.clear(ctx.stateDir, identity.name);
    throw new KubebootError(`${identity.name}: CSR ${name} was signed but the certificate is not acceptable: ${problems.join('; ')}`);
  }

  if (identity.kubeconfigPath !== null) {
    try {
      await proveIdentity(identity, ctx, certPem, key.pem);
    } catch (err) {
      // The same CSR would give the same unusable certificate: start over next time.
      if (err instanceof IdentityMismatchError || (err instanceof ApiError && err.status === 401))
        await store.pendingKey.clear(ctx.stateDir, identity.name);
      throw err;
    }
  }

  // The switch-over is one unit: a kubeconfig that cannot be written is found
  // before the -current.pem link moves, not after.
  const stored = await (ctx.serialize ?? ((fn) => fn()))(async () => {
    const kubeconfig = await kubeconfigToWrite(identity, ctx, store);
    if (kubeconfig) await store.assertWritable(kubeconfig.path);
    const written = await store.update(identity, certPem, key.pem, ctx.clock.now());
    if (kubeconfig) await store.write(kubeconfig.path, kubeconfig.text);
    return written;
  });
  await store.pendingKey.clear(ctx.stateDir, identity.name);
  const storeMillis = ctx.clock.monotonic() - arrived;
  const notAfter = parseCertificateChain(certPem)[0]!.notAfter;
  log.info(`${identity.name} credential stored at ${stored.file}, valid until ${notAfter.toISOString()}`, { csr: name });
  // As an assessment reads it back: the PEM blocks as the store writes them.
  const onDisk = splitCredential(certPem + key.pem) ?? { certPem, keyPem: key.pem };
  const usable: Usable = {
    identity,
    state: 'usable',
    certPem: onDisk.certPem,
    keyPem: onDisk.keyPem,
    notAfter,
    cluster: identity.kubeconfigPath !== null ? ctx.cluster : null,
  };
  return { csrName: name, certFile: stored.file, currentPath: stored.currentPath, notAfter, waitedSeconds, storeMillis, stored: usable };
}

/** The challenge blob a CSR was denied with (tpm/challenge.ts), or null when it was refused otherwise. */
function challengeOf(err: unknown): Credential | null {
  if (!(err instanceof CsrRejectedError) || err.denied?.reason !== CHALLENGE_REASON) return null;
  return challengeIn(err.denied.message);
}

/** Files one CSR with `key` (and its TPM evidence, with `answer` to a challenge) and waits for its certificate. */
async function requestCertificate(
  identity: Identity,
  ctx: IssueContext,
  key: PrivateKey,
  answer: Buffer | undefined,
  log: Logger,
): Promise<{ name: string; certPem: string }> {
  const store = storeOf(ctx);
  const requestPem = await withTpmEvidence(
    identity,
    ctx,
    await createCsrPem({ key, subject: identity.subject, dnsNames: identity.dnsNames, ipAddresses: identity.ipAddresses }),
    answer,
  );
  const name = csrName(key.publicKeyDer, identity.subject, identity.usages);
  try {
    const csr = await retryTransient(
      `${identity.name}: creating CSR ${name}`,
      () =>
        createCsr(
          ctx.requester,
          {
            name,
            requestPem,
            signerName: identity.signerName,
            usages: identity.usages,
            expirationSeconds: requestedExpiration(identity, ctx.expirationSeconds),
          },
          (existing) => compatibility(existing, identity, key, ctx.clock.now()),
          ctx.signal,
        ),
      { timeoutMs: ctx.waitTimeoutMs, logger: log, signal: ctx.signal, clock: ctx.clock },
    );
    ctx.onCsrSubmitted?.(identity, name);
    log.info(`CSR ${name} submitted for ${identity.subject.commonName} (signer ${identity.signerName})`, { csr: name });
    const certPem = await waitForCertificate(ctx.requester, csr, {
      logger: log,
      timeoutMs: ctx.waitTimeoutMs,
      pendingNoticeMs: ctx.pendingNoticeMs,
      signal: ctx.signal,
      clock: ctx.clock,
    });
    return { name, certPem };
  } catch (err) {
    // A CSR that was denied, failed, deleted or cannot be adopted will not
    // get better: the next attempt starts over with a fresh key and name.
    // A timeout or an interruption keeps the key, so a restart adopts the CSR.
    if (err instanceof CsrRejectedError || err instanceof CsrUnusableError) {
      await store.pendingKey.clear(ctx.stateDir, identity.name);
    }
    throw err;
  }
}

/**
 * With a TPM, a kubelet client CSR (first issue and renewal alike) carries
 * a quote by the machine's AK bound to this request's subject, key, the
 * current window and the approver's beacon read just before
 * (tpm/csr-evidence.ts, credential/tpm-beacon.ts), as one PEM block after the request:
 * the approver's tpm-attested rule requires it of a TPM-enrolled name. The
 * CSR's name does not depend on it (pki/csr-name.ts), so a restart that
 * re-files the same request with a fresh quote adopts the CSR on the server.
 * `answer`: the credential a challenge's activation opened, which this CSR
 * carries back with a quote by the same AK.
 */
async function withTpmEvidence(identity: Identity, ctx: IssueContext, requestPem: string, answer?: Buffer): Promise<string> {
  if (ctx.tpm == null || identity.signerName !== KUBELET_CLIENT_SIGNER) return requestPem;
  const where = ctx.tpm;
  const [block] = pemBlocks(requestPem);
  if (block === undefined) throw new KubebootError(`${identity.name}: the CSR made has no PEM block`);
  const beacon = await retryTransient(`${identity.name}: reading the approver's beacon`, () => readTpmBeacon(ctx.requester, ctx.signal), {
    timeoutMs: ctx.waitTimeoutMs,
    logger: ctx.logger,
    signal: ctx.signal,
    clock: ctx.clock,
  });
  const evidence = await withTpm(where, (tpm) => quoteCsr(tpm, block.der, ctx.clock.now(), beacon, answer));
  return `${requestPem.trimEnd()}\n${evidencePem(evidence)}`;
}

/**
 * The identity's kubeconfig when it must be (re)written. It names the stable
 * `-current.pem` path, not the timestamped file, so a renewal leaves it as it
 * is: only the first issue, a moved API server or a new CA rewrite it.
 */
async function kubeconfigToWrite(identity: Identity, ctx: IssueContext, store: Store): Promise<{ path: string; text: string } | null> {
  if (identity.kubeconfigPath === null) return null;
  const text = renderIdentityKubeconfig(identity, ctx.cluster);
  return (await store.read(identity.kubeconfigPath)) === text ? null : { path: identity.kubeconfigPath, text };
}

/** matches kubelet: the key for an in-flight CSR is on disk before the CSR is sent, so a restart reuses it. `fresh`: never the renewal's reused key. */
async function keyFor(identity: Identity, ctx: IssueContext, store: Store, fresh = false): Promise<PrivateKey> {
  const pending = await store.pendingKey.load(ctx.stateDir, identity.name);
  if (pending) {
    try {
      return await parsePrivateKey(pending);
    } catch {
      ctx.logger.warn(`${identity.name}: pending key in ${ctx.stateDir} is unreadable; generating a new one`);
    }
  }
  const key = ctx.reuseKeyPem && !fresh ? await parsePrivateKey(ctx.reuseKeyPem) : await generateKey(ctx.keyAlgorithm);
  await store.pendingKey.save(ctx.stateDir, identity.name, key.pem);
  return key;
}

/** The new credential must authenticate as the requested subject before it replaces anything. */
async function proveIdentity(identity: Identity, ctx: IssueContext, certPem: string, keyPem: string): Promise<void> {
  const client = new KubeClient(ctx.cluster, { kind: 'client-certificate', certPem, keyPem }, ctx.dispatcher);
  try {
    const user = await retryTransient(`${identity.name}: proving the new certificate`, () => whoAmI(client, ctx.signal), {
      timeoutMs: ctx.waitTimeoutMs,
      logger: ctx.logger,
      signal: ctx.signal,
      clock: ctx.clock,
    });
    const missing = identity.subject.organizations.filter((o) => !user.groups.includes(o));
    if (user.username !== identity.subject.commonName || missing.length > 0) {
      throw new IdentityMismatchError(
        `${identity.name}: the API server sees the new certificate as ${user.username} in [${user.groups.join(', ')}], want ${identity.subject.commonName} in [${identity.subject.organizations.join(', ')}]; keeping the previous credential`,
      );
    }
  } finally {
    await client.close();
  }
}

/** The signer backdates NotBefore by 5 min; a later NotBefore means this node's clock is behind. */
const MAX_CLOCK_SKEW_MS = 24 * 3600_000;

/**
 * The time to judge a fresh certificate at. A node whose clock runs behind
 * the signer's would otherwise reject every certificate and ask again
 * forever; the kubelet does not check NotBefore at all. Within a day of skew
 * the certificate is judged at its own NotBefore, with a warning.
 */
function checkTime(certPem: string, now: Date, log: Logger): Date {
  const leaf = parseCertificateChain(certPem)[0];
  if (!leaf || leaf.notBefore <= now) return now;
  const skew = leaf.notBefore.getTime() - now.getTime();
  if (skew > MAX_CLOCK_SKEW_MS) return now;
  log.warn(
    `the new certificate is valid from ${leaf.notBefore.toISOString()}, ${Math.round(skew / 1000)}s ahead of this node's clock; check time synchronisation`,
  );
  return leaf.notBefore;
}
