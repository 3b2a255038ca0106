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
export function oidText(content: Uint8Array): string {
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
  /** The CertificationRequestInfo exactly as received: what the signature covers. */
  info: Uint8Array;
  /** The SubjectPublicKeyInfo exactly as received. */
  publicKey: Uint8Array;
  /** Dotted OID of the signature algorithm. */
  signatureAlgorithm: string;
  /** The signature BIT STRING's bits, or null when its last byte has unused bits (no signature kubeboot checks has). */
  signature: Uint8Array | null;
  /** The subject Name exactly as received (what TPM evidence binds with the key: tpm/csr-evidence.ts). */
  subjectDer: Uint8Array;
}

const INTEGER = 0x02;
const BIT_STRING = 0x03;

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
  const outer = children(der, request.contentStart, request.end, what);
  const [info, algorithm, signature] = outer;
  if (!info || info.tag !== SEQUENCE) bad('has no certificationRequestInfo');
  if (outer.length !== 3 || algorithm?.tag !== SEQUENCE || signature?.tag !== BIT_STRING || signature.end === signature.contentStart)
    bad('is not certificationRequestInfo, signatureAlgorithm, signature');
  const [algorithmId] = children(der, algorithm!.contentStart, algorithm!.end, what);
  if (algorithmId?.tag !== OBJECT_IDENTIFIER) bad('has a malformed signatureAlgorithm');
  const fields = children(der, info!.contentStart, info!.end, what);
  const [version, subjectName, publicKey, attributes] = fields;
  if (
    fields.length !== 4 ||
    version?.tag !== INTEGER ||
    subjectName?.tag !== SEQUENCE ||
    publicKey?.tag !== SEQUENCE ||
    attributes?.tag !== ATTRIBUTES
  )
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
    info: der.subarray(info!.start, info!.end),
    publicKey: der.subarray(publicKey!.start, publicKey!.end),
    signatureAlgorithm: oidText(der.subarray(algorithmId!.contentStart, algorithmId!.end)),
    signature: der[signature!.contentStart] === 0 ? der.subarray(signature!.contentStart + 1, signature!.end) : null,
    subjectDer: der.subarray(subjectName!.start, subjectName!.end),
  };
}

const BOOLEAN = 0x01;
const OCTET_STRING = 0x04;

export interface DerExtension {
  oid: string;
  critical: boolean;
  /** The content of extnValue (the extension's own DER). */
  value: Uint8Array;
}

/** The items of `bytes`, which must be exactly one SEQUENCE (of `items`, for the message). */
function sequenceOf(bytes: Uint8Array, what: string, items: string): Tlv[] {
  const list = readTlv(bytes, 0, bytes.length, what);
  if (list.tag !== SEQUENCE || list.end !== bytes.length) throw new KubebootError(`${what} is not one SEQUENCE of ${items}`);
  return children(bytes, list.contentStart, list.end, what);
}

/** The extensions of an Extensions value (SEQUENCE OF Extension), in order. */
export function extensionsOf(extensions: Uint8Array): DerExtension[] {
  const what = 'extension request';
  return sequenceOf(extensions, what, 'extensions').map((extension) => {
    const fields = children(extensions, extension.contentStart, extension.end, what);
    const [id] = fields;
    const critical = fields.length === 3 ? fields[1] : undefined;
    const value = fields.at(-1);
    if (
      extension.tag !== SEQUENCE ||
      id?.tag !== OBJECT_IDENTIFIER ||
      fields.length < 2 ||
      fields.length > 3 ||
      (critical !== undefined && (critical.tag !== BOOLEAN || critical.end - critical.contentStart !== 1)) ||
      value?.tag !== OCTET_STRING
    )
      throw new KubebootError(`${what} has a malformed extension`);
    return {
      oid: oidText(extensions.subarray(id.contentStart, id.end)),
      critical: critical !== undefined && extensions[critical.contentStart] !== 0,
      value: extensions.subarray(value.contentStart, value.end),
    };
  });
}

/** The extension IDs of an Extensions value (SEQUENCE OF Extension), in order. */
export function extensionIds(extensions: Uint8Array): string[] {
  return extensionsOf(extensions).map((e) => e.oid);
}

export interface GeneralName {
  /** The context tag number: 0 otherName, 1 rfc822Name, 2 dNSName, 4 directoryName, 6 URI, 7 iPAddress, 8 registeredID (RFC 5280 §4.2.1.6). */
  kind: number;
  /** The name's content octets (for otherName and directoryName, the encoded structure inside the tag). */
  content: Uint8Array;
}

/** The names of a SubjectAltName extension's value (GeneralNames, a SEQUENCE OF GeneralName), in order. */
export function generalNames(value: Uint8Array): GeneralName[] {
  const what = 'subject alternative name extension';
  return sequenceOf(value, what, 'names').map((name) => {
    if ((name.tag & 0xc0) !== 0x80) throw new KubebootError(`${what} has a name that is not context-tagged`);
    return { kind: name.tag & 0x1f, content: value.subarray(name.contentStart, name.end) };
  });
}
