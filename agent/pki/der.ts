/**
 * Just enough DER to cut the SubjectPublicKeyInfo out of a certificate
 * byte-for-byte. Pins must hash exactly what Go's
 * `x509.Certificate.RawSubjectPublicKeyInfo` holds (matches kubeadm
 * pubkeypin.Hash); a library that re-serialises the parsed structure could
 * differ for an unusual but valid encoding.
 */
import { KubebootError } from '../errors.js';

interface Tlv {
  tag: number;
  /** Offset of the tag byte. */
  start: number;
  /** Offset of the first content byte. */
  contentStart: number;
  /** Offset one past the last content byte. */
  end: number;
}

function readTlv(der: Uint8Array, offset: number, limit: number): Tlv {
  const fail = (): never => {
    throw new KubebootError('certificate DER is truncated or malformed');
  };
  if (offset + 2 > limit) fail();
  const tag = der[offset] as number;
  let length = der[offset + 1] as number;
  let contentStart = offset + 2;
  if (length & 0x80) {
    const octets = length & 0x7f;
    if (octets === 0 || octets > 4 || contentStart + octets > limit) fail();
    length = 0;
    for (let i = 0; i < octets; i++) length = length * 256 + (der[contentStart + i] as number);
    contentStart += octets;
  }
  const end = contentStart + length;
  if (end > limit) fail();
  return { tag, start: offset, contentStart, end };
}

const SEQUENCE = 0x30;
const VERSION = 0xa0; // [0] EXPLICIT Version, optional (absent means v1)

/** The raw SubjectPublicKeyInfo of an X.509 certificate (RFC 5280 §4.1). */
export function subjectPublicKeyInfoOf(certDer: Uint8Array): Uint8Array {
  const cert = readTlv(certDer, 0, certDer.length);
  const tbs = readTlv(certDer, cert.contentStart, cert.end);
  if (cert.tag !== SEQUENCE || tbs.tag !== SEQUENCE) {
    throw new KubebootError('certificate DER is not a certificate');
  }
  let field = readTlv(certDer, tbs.contentStart, tbs.end);
  if (field.tag === VERSION) field = readTlv(certDer, field.end, tbs.end);
  // serialNumber, signature, issuer, validity, subject precede the key.
  for (let i = 0; i < 5; i++) field = readTlv(certDer, field.end, tbs.end);
  if (field.tag !== SEQUENCE) throw new KubebootError('certificate DER has no subject public key info');
  return certDer.subarray(field.start, field.end);
}
