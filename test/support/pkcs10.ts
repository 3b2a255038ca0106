// PKCS#10 requests written byte by byte, for tests that attack a CSR parser:
// any subject (string types, extra attributes, multi-valued RDNs, several
// CNs), any SAN kind, any extension or attribute, and any key node:crypto
// makes, P-224 and Ed25519 included, which WebCrypto cannot sign with.
import { generateKeyPairSync, sign, type KeyObject } from 'node:crypto';
import { isIPv4 } from 'node:net';

export type KeyKind = 'ecdsa-p256' | 'ecdsa-p384' | 'ecdsa-p224' | 'rsa-1024' | 'rsa-2048' | 'ed25519';

export interface KeyPair {
  kind: KeyKind;
  privateKey: KeyObject;
  publicKey: KeyObject;
}

export function generateKey(kind: KeyKind): KeyPair {
  const pair =
    kind === 'ed25519'
      ? generateKeyPairSync('ed25519')
      : kind.startsWith('rsa-')
        ? generateKeyPairSync('rsa', { modulusLength: Number(kind.slice(4)) })
        : generateKeyPairSync('ec', {
            namedCurve: { 'ecdsa-p256': 'prime256v1', 'ecdsa-p384': 'secp384r1', 'ecdsa-p224': 'secp224r1' }[kind as 'ecdsa-p256'],
          });
  return { kind, ...pair };
}

// ---- DER ----

function lengthOctets(n: number): number[] {
  if (n < 0x80) return [n];
  const bytes: number[] = [];
  for (let v = n; v > 0; v >>>= 8) bytes.unshift(v & 0xff);
  return [0x80 | bytes.length, ...bytes];
}

export function tlv(tag: number, content: Uint8Array | number[]): Buffer {
  return Buffer.concat([Buffer.from([tag, ...lengthOctets(content.length)]), Buffer.from(content)]);
}

const seq = (...items: Buffer[]) => tlv(0x30, Buffer.concat(items));
const set = (...items: Buffer[]) => tlv(0x31, Buffer.concat(items));

function oidContent(dotted: string): number[] {
  const [a = 0, b = 0, ...rest] = dotted.split('.').map(Number);
  const out = [40 * a + b];
  for (const arc of rest) {
    const chunk: number[] = [arc & 0x7f];
    for (let v = Math.floor(arc / 128); v > 0; v = Math.floor(v / 128)) chunk.unshift(0x80 | (v & 0x7f));
    out.push(...chunk);
  }
  return out;
}

export const oid = (dotted: string): Buffer => tlv(0x06, oidContent(dotted));

/** ASN.1 string types a subject value may use. */
export const STRING_TAGS = { utf8: 0x0c, printable: 0x13, teletex: 0x14, ia5: 0x16, universal: 0x1c, bmp: 0x1e } as const;
export type StringType = keyof typeof STRING_TAGS;

export function asn1String(type: StringType, value: string): Buffer {
  const tag = STRING_TAGS[type];
  if (type === 'utf8') return tlv(tag, Buffer.from(value, 'utf8'));
  if (type === 'bmp') return tlv(tag, Buffer.from(value, 'utf16le').swap16());
  if (type === 'universal')
    return tlv(
      tag,
      Buffer.from(
        [...value].flatMap((c) => {
          const p = c.codePointAt(0)!;
          return [p >>> 24, (p >>> 16) & 0xff, (p >>> 8) & 0xff, p & 0xff];
        }),
      ),
    );
  return tlv(tag, Buffer.from(value, 'latin1'));
}

export const OIDS = {
  CN: '2.5.4.3',
  O: '2.5.4.10',
  OU: '2.5.4.11',
  C: '2.5.4.6',
  serialNumber: '2.5.4.5',
  UID: '0.9.2342.19200300.100.1.1',
  DC: '0.9.2342.19200300.100.1.25',
  emailAddress: '1.2.840.113549.1.9.1',
  extensionRequest: '1.2.840.113549.1.9.14',
  subjectAltName: '2.5.29.17',
  basicConstraints: '2.5.29.19',
  keyUsage: '2.5.29.15',
  extKeyUsage: '2.5.29.37',
  subjectKeyIdentifier: '2.5.29.14',
  upn: '1.3.6.1.4.1.311.20.2.3',
} as const;

export interface NameValue {
  oid: string;
  type: StringType;
  value: string;
}

/** Name: a SEQUENCE of RDNs, each a SET of the given type/value pairs (more than one: multi-valued). */
export function encodeName(rdns: NameValue[][]): Buffer {
  return seq(...rdns.map((rdn) => set(...rdn.map((v) => seq(oid(v.oid), asn1String(v.type, v.value))))));
}

export type San =
  | { kind: 'dns' | 'email' | 'uri'; value: string }
  | { kind: 'ip'; value: string }
  | { kind: 'otherName'; value: string }
  | { kind: 'registeredID'; value: string }
  | { kind: 'directoryName'; value: NameValue[][] };

function ipOctets(ip: string): number[] {
  if (isIPv4(ip)) return ip.split('.').map(Number);
  const [head = '', tail = ''] = ip.split('::');
  const groups = (s: string) => (s ? s.split(':').map((g) => parseInt(g, 16)) : []);
  const h = groups(head);
  const tl = groups(tail);
  const all = ip.includes('::') ? [...h, ...Array(8 - h.length - tl.length).fill(0), ...tl] : h;
  return all.flatMap((g) => [g >> 8, g & 0xff]);
}

function generalName(san: San): Buffer {
  switch (san.kind) {
    case 'email':
      return tlv(0x81, Buffer.from(san.value, 'latin1'));
    case 'dns':
      return tlv(0x82, Buffer.from(san.value, 'latin1'));
    case 'uri':
      return tlv(0x86, Buffer.from(san.value, 'latin1'));
    case 'ip':
      return tlv(0x87, ipOctets(san.value));
    case 'registeredID':
      return tlv(0x88, oidContent(san.value));
    case 'otherName':
      return tlv(0xa0, Buffer.concat([oid(OIDS.upn), tlv(0xa0, asn1String('utf8', san.value))]));
    case 'directoryName':
      return tlv(0xa4, encodeName(san.value));
  }
}

export interface Extension {
  oid: string;
  critical?: boolean;
  value: Buffer;
}

export const sanExtension = (sans: San[]): Extension => ({ oid: OIDS.subjectAltName, value: seq(...sans.map(generalName)) });

function encodeExtension(e: Extension): Buffer {
  return seq(oid(e.oid), ...(e.critical ? [tlv(0x01, [0xff])] : []), tlv(0x04, e.value));
}

export interface RequestSpec {
  subject: NameValue[][];
  /** Each inner list is one extensionRequest attribute (usually one). */
  extensionRequests: Extension[][];
  key: KeyPair;
  /** Flip a bit of the signature. */
  badSignature?: boolean;
}

function signatureAlgorithm(kind: KeyKind): { hash: string | null; algorithm: Buffer } {
  if (kind === 'ed25519') return { hash: null, algorithm: seq(oid('1.3.101.112')) };
  if (kind.startsWith('rsa-')) return { hash: 'sha256', algorithm: seq(oid('1.2.840.113549.1.1.11'), tlv(0x05, [])) };
  if (kind === 'ecdsa-p384') return { hash: 'sha384', algorithm: seq(oid('1.2.840.10045.4.3.3')) };
  return { hash: 'sha256', algorithm: seq(oid('1.2.840.10045.4.3.2')) };
}

/** The request as PEM, signed by its key (or with a flipped signature bit). */
export function buildRequestPem(spec: RequestSpec): string {
  const spki = spec.key.publicKey.export({ type: 'spki', format: 'der' });
  const attributes = spec.extensionRequests.map((exts) => seq(oid(OIDS.extensionRequest), set(seq(...exts.map(encodeExtension)))));
  const info = seq(tlv(0x02, [0]), encodeName(spec.subject), spki, tlv(0xa0, Buffer.concat(attributes)));
  const { hash, algorithm } = signatureAlgorithm(spec.key.kind);
  const signature = sign(hash, info, spec.key.privateKey);
  if (spec.badSignature) signature[signature.length - 1]! ^= 0x01;
  const der = seq(info, algorithm, tlv(0x03, Buffer.concat([Buffer.from([0]), signature])));
  const lines = der.toString('base64').match(/.{1,64}/g) ?? [];
  return `-----BEGIN CERTIFICATE REQUEST-----\n${lines.join('\n')}\n-----END CERTIFICATE REQUEST-----\n`;
}
