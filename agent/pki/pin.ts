/**
 * CA public-key pins, as `kubeadm join --discovery-token-ca-cert-hash` takes
 * them (matches kubeadm util/pubkeypin): `sha256:` + hex SHA-256 of the CA
 * certificate's SubjectPublicKeyInfo DER. Pinning the key rather than the
 * certificate survives re-issuing the CA with the same key.
 */
import { createHash } from 'node:crypto';
import { KubebootError } from '../errors.js';
import { subjectPublicKeyInfoOf } from './der.js';
import { pemBlocks, toPem } from './pem.js';
import { canonicalPin } from './pin-format.js';

function certificateDers(pem: string): Uint8Array[] {
  const ders = pemBlocks(pem)
    .filter((b) => b.type === 'CERTIFICATE')
    .map((b) => b.der);
  if (ders.length === 0) throw new KubebootError('no certificate found in CA PEM');
  return ders;
}

function hashOf(certDer: Uint8Array): string {
  return 'sha256:' + createHash('sha256').update(subjectPublicKeyInfoOf(certDer)).digest('hex');
}

/** The pin of the first certificate in `certPem`. */
export function caCertHash(certPem: string): string {
  return hashOf(certificateDers(certPem)[0] as Uint8Array);
}

/**
 * The certificates of `caPem` whose key is pinned, re-encoded from the very
 * DER that was hashed, and how many were left out. kubeadm accepts a bundle
 * when any certificate matches (CheckAny) and then trusts all of it, so
 * whoever holds the token can append a CA of their own to a correctly signed
 * cluster-info and be trusted next to the real one; the pin is there to stop
 * exactly that. Only what was pinned is handed on to TLS: other blocks
 * (TRUSTED CERTIFICATE, X509 CERTIFICATE, which OpenSSL would also load as
 * trust anchors) and unpinned certificates are dropped.
 */
export function pinnedCertificates(caPem: string, pins: readonly string[]): { pinned: string; count: number; dropped: number } {
  const wanted = new Set(pins.map(canonicalPin).filter((p) => p !== null));
  const blocks = pemBlocks(caPem);
  const kept = blocks.filter((b) => b.type === 'CERTIFICATE' && wanted.has(hashOf(b.der)));
  return { pinned: kept.map((b) => toPem('CERTIFICATE', b.der)).join(''), count: kept.length, dropped: blocks.length - kept.length };
}
