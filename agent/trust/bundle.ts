/**
 * A cluster CA bundle as kubeboot trusts it: every entry a parseable CA
 * certificate, valid now, and the whole bundle small. The bundle's identity
 * is the set of its certificates (order and duplicates do not matter), so a
 * re-published bundle with the same CAs never rewrites a file or restarts
 * anything.
 */
import { createHash } from 'node:crypto';
import { parseCertificateChain, type CertInfo } from '../pki/certificate.js';
import { intactPemBlocks, toPem } from '../pki/pem.js';
import { caCertHash } from '../pki/pin.js';

/** A rotation needs two CAs, perhaps with intermediates; every public root together is ~220 KiB. */
export const MAX_BUNDLE_BYTES = 64 * 1024;
export const MAX_BUNDLE_CERTS = 16;

export type BundleProblem = 'too-big' | 'unparseable' | 'not-ca' | 'expired' | 'not-yet-valid';

export interface TrustBundle {
  /** Canonical PEM: each certificate re-encoded from its DER, in the given order, duplicates dropped. */
  pem: string;
  cas: CertInfo[];
  /** Lower-case hex SHA-256 over the sorted certificate fingerprints: equal for the same set of CAs. */
  hash: string;
  /** `sha256:` public-key pins (kubeadm's --discovery-token-ca-cert-hash form), one per CA. */
  pins: string[];
}

export type BundleCheck = { ok: true; bundle: TrustBundle } | { ok: false; problem: BundleProblem; message: string };

/** Pure: whether `pem` may become the node's trust, judged at `now`. `what` names the source in messages. */
export function checkBundle(pem: string, now: Date, what: string): BundleCheck {
  const refuse = (problem: BundleProblem, message: string): BundleCheck => ({ ok: false, problem, message: `${what}: ${message}` });
  const bytes = Buffer.byteLength(pem, 'utf8');
  if (bytes > MAX_BUNDLE_BYTES) return refuse('too-big', `CA bundle is ${bytes} bytes; at most ${MAX_BUNDLE_BYTES} are accepted`);
  const blocks = intactPemBlocks(pem);
  if (blocks === null || blocks.length === 0) return refuse('unparseable', 'CA bundle holds no intact PEM certificate');
  if (blocks.length > MAX_BUNDLE_CERTS)
    return refuse('too-big', `CA bundle has ${blocks.length} entries; at most ${MAX_BUNDLE_CERTS} are accepted`);
  const other = blocks.find((b) => b.type !== 'CERTIFICATE');
  if (other) return refuse('unparseable', `CA bundle holds a "${other.type.slice(0, 32)}" block; only CERTIFICATE blocks are accepted`);
  const cas: CertInfo[] = [];
  const seen = new Set<string>();
  for (const [i, block] of blocks.entries()) {
    let cert: CertInfo;
    try {
      cert = parseCertificateChain(toPem('CERTIFICATE', block.der))[0]!;
    } catch {
      return refuse('unparseable', `CA bundle entry ${i + 1} does not parse as an X.509 certificate`);
    }
    const name = `entry ${i + 1} (CN=${cert.subject.commonName.slice(0, 64)})`;
    if (!cert.isCa) return refuse('not-ca', `CA bundle ${name} is not a CA certificate (basic constraints CA:TRUE missing)`);
    if (cert.hasKeyUsage && !cert.keyUsages.includes('cert sign'))
      return refuse('not-ca', `CA bundle ${name} may not sign certificates (key usage lacks cert sign)`);
    if (now >= cert.notAfter) return refuse('expired', `CA bundle ${name} expired at ${cert.notAfter.toISOString()}`);
    if (now < cert.notBefore) return refuse('not-yet-valid', `CA bundle ${name} is not valid until ${cert.notBefore.toISOString()}`);
    const fingerprint = sha256(cert.der);
    if (seen.has(fingerprint)) continue;
    seen.add(fingerprint);
    cas.push(cert);
  }
  return { ok: true, bundle: bundleOf(cas, [...seen]) };
}

/**
 * A bundle the node already trusts (its kubeconfig's CA), read without the
 * freshness checks: an expired CA in it is the reason to rotate, not a reason
 * to stop reading it. Throws when it does not parse.
 */
export function trustedBundle(pem: string): TrustBundle {
  const certs = parseCertificateChain(pem);
  const seen = new Map<string, CertInfo>();
  for (const cert of certs) if (!seen.has(sha256(cert.der))) seen.set(sha256(cert.der), cert);
  return bundleOf([...seen.values()], [...seen.keys()]);
}

function bundleOf(cas: CertInfo[], fingerprints: string[]): TrustBundle {
  return {
    pem: cas.map((c) => c.pem).join(''),
    cas,
    hash: sha256(Buffer.from([...fingerprints].sort().join('\n'))),
    pins: cas.map((c) => caCertHash(c.pem)),
  };
}

function sha256(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}
