/**
 * CA public-key pins, as `kubeadm join --discovery-token-ca-cert-hash` takes
 * them (matches kubeadm util/pubkeypin): `sha256:` + hex SHA-256 of the CA
 * certificate's SubjectPublicKeyInfo DER. Pinning the key rather than the
 * certificate survives re-issuing the CA with the same key.
 */
import { createHash } from 'node:crypto';
import { KubebootError } from '../errors.js';
import { subjectPublicKeyInfoOf } from './der.js';
import { pemBlocks } from './pem.js';
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

/** Pins of every certificate in every bundle, for "none of ... is pinned" messages. */
export function caCertHashes(caPems: readonly string[]): string[] {
  return caPems.flatMap((pem) => certificateDers(pem).map(hashOf));
}

/** Any certificate in the bundle(s) matching any pin is enough (matches kubeadm Set.CheckAny). */
export function matchesAnyPin(caPems: readonly string[], pins: readonly string[]): boolean {
  const wanted = new Set(pins.map(canonicalPin).filter((p) => p !== null));
  return caCertHashes(caPems).some((hash) => wanted.has(hash));
}
