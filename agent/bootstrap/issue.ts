/**
 * Obtains one identity's certificate from the API server and puts it on disk:
 * key (persisted before the CSR leaves) → CSR → wait → verify → prove → store
 * → kubeconfig. Used by first bootstrap and by renewal alike; only the client
 * that authenticates the CSR differs.
 */
import { CsrRejectedError, KubebootError } from '../errors.js';
import type { Identity, KeyAlgorithm } from '../identity.js';
import type { Logger } from '../log.js';
import { ApiError, KubeClient, type Endpoint } from '../kube/client.js';
import { createCsr, CsrUnusableError, waitForCertificate } from '../kube/csr.js';
import type { CertificateSigningRequest } from '../kube/csr-state.js';
import { whoAmI } from '../kube/whoami.js';
import { checkIssuedCertificate, parseCertificateChain } from '../pki/certificate.js';
import { createCsrPem, parseCsrPem } from '../pki/csr.js';
import { csrName } from '../pki/csr-name.js';
import { generateKey, parsePrivateKey, samePublicKey, type PrivateKey } from '../pki/keys.js';
import { renderClientKubeconfig } from '../kubeconfig/render.js';
import { writeFileAtomic, type WriteObserver } from '../store/atomic.js';
import { storeCredential } from '../store/cert-store.js';
import { clearPendingKey, loadPendingKey, savePendingKey } from '../store/pending-key.js';

export interface IssueContext {
  /** The cluster the new kubeconfig points at (server and CA). */
  cluster: Endpoint & { caPem: string };
  /** Authenticates the CSR: the bootstrap token, or the current certificate on renewal. */
  requester: KubeClient;
  stateDir: string;
  keyAlgorithm: KeyAlgorithm;
  expirationSeconds: number | null;
  /** On renewal with reuseKey, the current key; otherwise a fresh one is made. */
  reuseKeyPem?: string | null;
  waitTimeoutMs: number;
  pendingNoticeMs: number;
  logger: Logger;
  now: () => Date;
  signal?: AbortSignal;
  observer?: WriteObserver;
  onCsrWait?: (seconds: number) => void;
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
}

export async function issueCredential(identity: Identity, ctx: IssueContext): Promise<Issued> {
  const log = ctx.logger.child({ identity: identity.name });
  const key = await keyFor(identity, ctx);
  const requestPem = await createCsrPem({ key, subject: identity.subject, dnsNames: identity.dnsNames, ipAddresses: identity.ipAddresses });
  const name = csrName(key.publicKeyDer, identity.subject, identity.usages);
  const waitStart = Date.now();
  let certPem: string;
  try {
    const csr = await createCsr(
      ctx.requester,
      { name, requestPem, signerName: identity.signerName, usages: identity.usages, expirationSeconds: ctx.expirationSeconds },
      (existing) => compatibility(existing, identity, key, ctx.now()),
      ctx.signal,
    );
    log.info(`CSR ${name} submitted for ${identity.subject.commonName} (signer ${identity.signerName})`, { csr: name });
    certPem = await waitForCertificate(ctx.requester, csr, {
      logger: log,
      timeoutMs: ctx.waitTimeoutMs,
      pendingNoticeMs: ctx.pendingNoticeMs,
      ...(ctx.signal ? { signal: ctx.signal } : {}),
    });
  } catch (err) {
    // A CSR that was denied, failed, deleted or cannot be adopted will not
    // get better: the next attempt starts over with a fresh key and name.
    // A timeout or an interruption keeps the key, so a restart adopts the CSR.
    if (err instanceof CsrRejectedError || err instanceof CsrUnusableError) {
      await clearPendingKey(ctx.stateDir, identity.name, optsOf(ctx));
    }
    throw err;
  }
  const arrived = Date.now();
  const waitedSeconds = (arrived - waitStart) / 1000;
  ctx.onCsrWait?.(waitedSeconds);

  const problems = await checkIssuedCertificate({
    certPem,
    caPems: [ctx.cluster.caPem],
    publicKeyDer: key.publicKeyDer,
    subject: identity.subject,
    usages: identity.usages,
    now: checkTime(certPem, ctx.now(), log),
    dnsNames: identity.dnsNames,
    ipAddresses: identity.ipAddresses,
  });
  if (problems.length > 0) {
    // A fresh key makes the next attempt a fresh CSR instead of re-adopting this one.
    await clearPendingKey(ctx.stateDir, identity.name, optsOf(ctx));
    throw new KubebootError(`${identity.name}: CSR ${name} was signed but the certificate is not acceptable: ${problems.join('; ')}`);
  }

  if (identity.kubeconfigPath !== null) {
    try {
      await proveIdentity(identity, ctx, certPem, key.pem);
    } catch (err) {
      // The same CSR would give the same unusable certificate: start over next time.
      if (err instanceof IdentityMismatchError || (err instanceof ApiError && err.status === 401)) await clearPendingKey(ctx.stateDir, identity.name, optsOf(ctx));
      throw err;
    }
  }

  const stored = await storeCredential(identity, certPem, key.pem, ctx.now(), optsOf(ctx));
  if (identity.kubeconfigPath !== null) {
    const kubeconfig = renderClientKubeconfig({
      server: ctx.cluster.server,
      caPem: ctx.cluster.caPem,
      certFile: stored.currentPath,
      keyFile: stored.currentPath,
      userName: 'default-auth',
      tlsServerName: ctx.cluster.tlsServerName ?? null,
    });
    await writeFileAtomic(identity.kubeconfigPath, kubeconfig, { mode: 0o600, ...optsOf(ctx) });
  }
  await clearPendingKey(ctx.stateDir, identity.name, optsOf(ctx));
  const storeMillis = Date.now() - arrived;
  const notAfter = parseCertificateChain(certPem)[0]!.notAfter;
  log.info(`${identity.name} credential stored at ${stored.file}, valid until ${notAfter.toISOString()}`, { csr: name });
  return { csrName: name, certFile: stored.file, currentPath: stored.currentPath, notAfter, waitedSeconds, storeMillis };
}

/** matches kubelet: the key for an in-flight CSR is on disk before the CSR is sent, so a restart reuses it. */
async function keyFor(identity: Identity, ctx: IssueContext): Promise<PrivateKey> {
  const pending = await loadPendingKey(ctx.stateDir, identity.name);
  if (pending) {
    try {
      return await parsePrivateKey(pending);
    } catch {
      ctx.logger.warn(`${identity.name}: pending key in ${ctx.stateDir} is unreadable; generating a new one`);
    }
  }
  const key = ctx.reuseKeyPem ? await parsePrivateKey(ctx.reuseKeyPem) : await generateKey(ctx.keyAlgorithm);
  await savePendingKey(ctx.stateDir, identity.name, key.pem, optsOf(ctx));
  return key;
}

/** matches client-go ensureCompatible, plus: a CSR already issued with an expired certificate is not ours to reuse (kubernetes#65991). */
async function compatibility(existing: CertificateSigningRequest, identity: Identity, key: PrivateKey, now: Date): Promise<string | null> {
  if (existing.spec.signerName !== identity.signerName) return `signer is ${existing.spec.signerName}, want ${identity.signerName}`;
  let request;
  try {
    request = await parseCsrPem(Buffer.from(existing.spec.request, 'base64').toString('utf8'));
  } catch {
    return 'its request cannot be parsed';
  }
  if (!request.signatureValid || !samePublicKey(request.publicKeyDer, key.publicKeyDer)) return 'it was made with another key';
  if (request.subject.commonName !== identity.subject.commonName || !sameSet(request.subject.organizations, identity.subject.organizations)) {
    return `its subject is CN=${request.subject.commonName}, want CN=${identity.subject.commonName}`;
  }
  const issued = existing.status?.certificate;
  if (issued) {
    const leaf = parseCertificateChain(Buffer.from(issued, 'base64').toString('utf8'))[0];
    if (leaf && leaf.notAfter <= now) return `its certificate expired at ${leaf.notAfter.toISOString()}`;
  }
  return null;
}

class IdentityMismatchError extends KubebootError {
  override readonly name = 'IdentityMismatchError';
}

/** The new credential must authenticate as the requested subject before it replaces anything. */
async function proveIdentity(identity: Identity, ctx: IssueContext, certPem: string, keyPem: string): Promise<void> {
  const client = new KubeClient(ctx.cluster, { kind: 'client-certificate', certPem, keyPem });
  try {
    const user = await whoAmI(client, ctx.signal);
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
  log.warn(`the new certificate is valid from ${leaf.notBefore.toISOString()}, ${Math.round(skew / 1000)}s ahead of this node's clock; check time synchronisation`);
  return leaf.notBefore;
}

function sameSet(a: string[], b: string[]): boolean {
  return a.length === b.length && [...a].sort().join('\n') === [...b].sort().join('\n');
}

function optsOf(ctx: IssueContext): { observer?: WriteObserver } {
  return ctx.observer ? { observer: ctx.observer } : {};
}
