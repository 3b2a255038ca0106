/**
 * Just enough DER to read structure byte-for-byte where a library's view
 * could differ from Go's:
 * - the SubjectPublicKeyInfo of a certificate: pins must hash exactly what
 *   Go's `x509.Certificate.RawSubjectPublicKeyInfo` holds (matches kubeadm
 *   pubkeypin.Hash); a library that re-serialises the parsed structure could
 *   differ for an unusual but valid encoding;
 * - the layout of a certificate request (every subject attribute and every
 *   request attribute), so the approver can refuse any request that two
 *   parsers could read differently.
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

function readTlv(der: Uint8Array, offset: number, limit: number, what = 'certificate'): Tlv {
  const fail = (): never => {
    throw new KubebootError(`${what} DER is truncated or malformed`);
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

/** Every TLV between `start` and `end`, which they must fill exactly. */
function children(der: Uint8Array, start: number, end: number, what: string): Tlv[] {
  const items: Tlv[] = [];
  for (let offset = start; offset < end; ) {
    const item = readTlv(der, offset, end, what);
    items.push(item);
    offset = item.end;
  }
  return items;
}

/** Dotted text of an OBJECT IDENTIFIER's content octets. */
function oidText(content: Uint8Array): string {
  const arcs: number[] = [];
  let value = 0;
  for (const byte of content) {
    value = value * 128 + (byte & 0x7f);
    if (byte & 0x80) continue;
    if (arcs.length === 0) arcs.push(value < 80 ? Math.floor(value / 40) : 2, value < 80 ? value % 40 : value - 80);
    else arcs.push(value);
    value = 0;
  }
  return arcs.join('.');
}

const OBJECT_IDENTIFIER = 0x06;
const SET = 0x31;
const ATTRIBUTES = 0xa0; // [0] IMPLICIT SET OF Attribute

export interface DerValue {
  /** Dotted OID of the attribute type. */
  oid: string;
  /** The value's ASN.1 tag (0x0c UTF8String, 0x13 PrintableString, ...). */
  tag: number;
  content: Uint8Array;
}

export interface CsrLayout {
  /** The subject's relative distinguished names in order, each the type/value pairs of its SET. */
  subject: DerValue[][];
  /** Each attribute of the request: its type and the encoded values of its SET. */
  attributes: { oid: string; values: Uint8Array[] }[];
  /** The subject Name and the SubjectPublicKeyInfo as encoded in the request (what TPM evidence binds: tpm/csr-evidence.ts). */
  subjectDer: Uint8Array;
  publicKeyDer: Uint8Array;
}

/**
 * The layout of a PKCS#10 request (RFC 2986 §4): nothing may follow it, and
 * every structure it is read through must be filled exactly.
 */
export function csrLayout(der: Uint8Array): CsrLayout {
  const what = 'certificate request';
  const bad = (why: string): never => {
    throw new KubebootError(`${what} DER ${why}`);
  };
  const request = readTlv(der, 0, der.length, what);
  if (request.tag !== SEQUENCE) bad('is not a SEQUENCE');
  if (request.end !== der.length) bad(`has ${der.length - request.end} bytes after it`);
  const [info] = children(der, request.contentStart, request.end, what);
  if (!info || info.tag !== SEQUENCE) bad('has no certificationRequestInfo');
  const fields = children(der, info!.contentStart, info!.end, what);
  const [, subjectName, publicKey, attributes] = fields;
  if (fields.length !== 4 || subjectName?.tag !== SEQUENCE || publicKey?.tag !== SEQUENCE || attributes?.tag !== ATTRIBUTES)
    bad('certificationRequestInfo is not version, subject, key, attributes');
  const subject = children(der, subjectName!.contentStart, subjectName!.end, what).map((rdn) => {
    if (rdn.tag !== SET) bad('subject has a relative distinguished name that is not a SET');
    return children(der, rdn.contentStart, rdn.end, what).map((pair) => {
      const [type, value, ...rest] = children(der, pair.contentStart, pair.end, what);
      if (pair.tag !== SEQUENCE || type?.tag !== OBJECT_IDENTIFIER || !value || rest.length > 0) bad('subject has a malformed attribute');
      return {
        oid: oidText(der.subarray(type!.contentStart, type!.end)),
        tag: value!.tag,
        content: der.subarray(value!.contentStart, value!.end),
      };
    });
  });
  const attrs = children(der, attributes!.contentStart, attributes!.end, what).map((attribute) => {
    const [type, values, ...rest] = children(der, attribute.contentStart, attribute.end, what);
    if (attribute.tag !== SEQUENCE || type?.tag !== OBJECT_IDENTIFIER || values?.tag !== SET || rest.length > 0)
      bad('has a malformed attribute');
    return {
      oid: oidText(der.subarray(type!.contentStart, type!.end)),
      values: children(der, values!.contentStart, values!.end, what).map((v) => der.subarray(v.start, v.end)),
    };
  });
  return {
    subject,
    attributes: attrs,
    subjectDer: der.subarray(subjectName!.start, subjectName!.end),
    publicKeyDer: der.subarray(publicKey!.start, publicKey!.end),
  };
}

/** The extension IDs of an Extensions value (SEQUENCE OF Extension), in order. */
export function extensionIds(extensions: Uint8Array): string[] {
  const what = 'extension request';
  const list = readTlv(extensions, 0, extensions.length, what);
  if (list.tag !== SEQUENCE || list.end !== extensions.length) throw new KubebootError(`${what} is not one SEQUENCE of extensions`);
  return children(extensions, list.contentStart, list.end, what).map((extension) => {
    const [id] = children(extensions, extension.contentStart, extension.end, what);
    if (extension.tag !== SEQUENCE || id?.tag !== OBJECT_IDENTIFIER) throw new KubebootError(`${what} has a malformed extension`);
    return oidText(extensions.subarray(id.contentStart, id.end));
  });
}
