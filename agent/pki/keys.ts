/**
 * Private keys: generate, read, and write them in the PEM forms client-go
 * writes itself (keyutil.MarshalPrivateKeyToPEM): SEC 1 `EC PRIVATE KEY` for
 * ECDSA and PKCS#1 `RSA PRIVATE KEY` for RSA. kubelet, kubectl and kubeadm
 * read those, and an operator inspecting the file sees the familiar form.
 * Reading also accepts PKCS#8 `PRIVATE KEY`.
 */
import { createPrivateKey, createPublicKey, generateKeyPair as generateKeyObjects, type KeyObject, type webcrypto } from 'node:crypto';
import { inspect, promisify } from 'node:util';
import { KubebootError } from '../errors.js';
import type { KeyAlgorithm } from '../identity.js';
import { isPrivateKeyBlock, pemBlocks } from './pem.js';
import { subjectPublicKeyInfoOf } from './der.js';

interface WebCryptoParams {
  /** For importKey. */
  importAlgorithm: webcrypto.EcKeyImportParams | webcrypto.RsaHashedImportParams;
  /** For signing a CSR with @peculiar/x509. */
  signingAlgorithm: webcrypto.EcdsaParams | webcrypto.Algorithm;
}

// matches Go's x509 signature choice per key (signingParamsForKey): SHA-256
// for P-256 and RSA, SHA-384 for P-384.
const PARAMS: Record<KeyAlgorithm, WebCryptoParams> = {
  'ecdsa-p256': {
    importAlgorithm: { name: 'ECDSA', namedCurve: 'P-256' },
    signingAlgorithm: { name: 'ECDSA', hash: 'SHA-256' },
  },
  'ecdsa-p384': {
    importAlgorithm: { name: 'ECDSA', namedCurve: 'P-384' },
    signingAlgorithm: { name: 'ECDSA', hash: 'SHA-384' },
  },
  'rsa-2048': rsaParams(),
  'rsa-3072': rsaParams(),
  'rsa-4096': rsaParams(),
};

function rsaParams(): WebCryptoParams {
  return {
    importAlgorithm: { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' },
    signingAlgorithm: { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' } as webcrypto.Algorithm,
  };
}

/**
 * A private key with everything later steps need. `pem` is secret: the
 * object redacts it from JSON.stringify and util.inspect so a stray log line
 * cannot leak it.
 */
export class PrivateKey {
  readonly algorithm: KeyAlgorithm;
  readonly pem: string;
  /** PKIX SubjectPublicKeyInfo DER, as Go's x509.MarshalPKIXPublicKey writes it. */
  readonly publicKeyDer: Uint8Array;
  /** WebCrypto pair for @peculiar/x509; the private half is not extractable. */
  readonly keyPair: webcrypto.CryptoKeyPair;
  readonly signingAlgorithm: webcrypto.EcdsaParams | webcrypto.Algorithm;

  constructor(algorithm: KeyAlgorithm, pem: string, publicKeyDer: Uint8Array, keyPair: webcrypto.CryptoKeyPair) {
    this.algorithm = algorithm;
    this.pem = pem;
    this.publicKeyDer = publicKeyDer;
    this.keyPair = keyPair;
    this.signingAlgorithm = PARAMS[algorithm].signingAlgorithm;
  }

  toJSON(): object {
    return { algorithm: this.algorithm, pem: '[redacted]' };
  }

  [inspect.custom](): string {
    return `PrivateKey { algorithm: '${this.algorithm}', pem: [redacted] }`;
  }
}

const generatePair = promisify(generateKeyObjects);

export async function generateKey(algorithm: KeyAlgorithm): Promise<PrivateKey> {
  const { privateKey } =
    algorithm === 'ecdsa-p256' || algorithm === 'ecdsa-p384'
      ? await generatePair('ec', { namedCurve: algorithm === 'ecdsa-p256' ? 'P-256' : 'P-384' })
      : await generatePair('rsa', { modulusLength: Number(algorithm.slice('rsa-'.length)), publicExponent: 0x10001 });
  return fromKeyObject(privateKey);
}

/**
 * Reads the first private key in `pem`, which may also hold certificates or
 * EC parameters (matches keyutil.ParsePrivateKeyPEM, which skips other blocks).
 * Errors never quote the input.
 */
export async function parsePrivateKey(pem: string): Promise<PrivateKey> {
  const blocks = pemBlocks(pem);
  if (blocks.some((b) => b.type === 'ENCRYPTED PRIVATE KEY')) {
    throw new KubebootError('encrypted private keys are not supported');
  }
  const block = blocks.find(isPrivateKeyBlock);
  if (!block) throw new KubebootError('no private key found in PEM');
  if (block.hasHeaders) throw new KubebootError('encrypted private keys are not supported');
  let keyObject: KeyObject;
  try {
    keyObject = createPrivateKey({
      key: Buffer.from(block.der),
      format: 'der',
      type: block.type === 'PRIVATE KEY' ? 'pkcs8' : block.type === 'RSA PRIVATE KEY' ? 'pkcs1' : 'sec1',
    });
  } catch {
    // The cause may carry OpenSSL's view of the bytes; leave it out.
    throw new KubebootError(`private key ("${block.type}" PEM block) does not parse`);
  }
  return fromKeyObject(keyObject);
}

function algorithmOf(key: KeyObject): KeyAlgorithm {
  const details = key.asymmetricKeyDetails ?? {};
  if (key.asymmetricKeyType === 'ec') {
    if (details.namedCurve === 'prime256v1') return 'ecdsa-p256';
    if (details.namedCurve === 'secp384r1') return 'ecdsa-p384';
    throw new KubebootError(`unsupported EC curve ${details.namedCurve ?? 'unknown'}: use P-256 or P-384`);
  }
  if (key.asymmetricKeyType === 'rsa') {
    const bits = details.modulusLength;
    if (bits === 2048 || bits === 3072 || bits === 4096) return `rsa-${bits}`;
    throw new KubebootError(`unsupported RSA key size ${bits ?? 'unknown'}: use 2048, 3072 or 4096 bits`);
  }
  throw new KubebootError(`unsupported private key type ${key.asymmetricKeyType ?? 'unknown'}: use ECDSA or RSA`);
}

async function fromKeyObject(privateKey: KeyObject): Promise<PrivateKey> {
  const algorithm = algorithmOf(privateKey);
  const ec = algorithm.startsWith('ecdsa-');
  const pem = privateKey.export({ type: ec ? 'sec1' : 'pkcs1', format: 'pem' }).toString();
  const publicKeyDer = new Uint8Array(createPublicKey(privateKey).export({ type: 'spki', format: 'der' }));
  const pkcs8 = privateKey.export({ type: 'pkcs8', format: 'der' });
  const { importAlgorithm } = PARAMS[algorithm];
  const keyPair: webcrypto.CryptoKeyPair = {
    privateKey: await crypto.subtle.importKey('pkcs8', pkcs8, importAlgorithm, false, ['sign']),
    publicKey: await crypto.subtle.importKey('spki', publicKeyDer, importAlgorithm, true, ['verify']),
  };
  return new PrivateKey(algorithm, pem, publicKeyDer, keyPair);
}

/** Whether two SubjectPublicKeyInfo encodings hold the same key (compared as keys, not bytes). */
export function samePublicKey(a: Uint8Array, b: Uint8Array): boolean {
  try {
    const ka = createPublicKey({ key: Buffer.from(a), format: 'der', type: 'spki' });
    const kb = createPublicKey({ key: Buffer.from(b), format: 'der', type: 'spki' });
    return ka.equals(kb);
  } catch {
    return false;
  }
}

/** SubjectPublicKeyInfo DER of the first certificate in `certPem`, byte-for-byte. */
export function publicKeyDerOfCertificate(certPem: string): Uint8Array {
  const block = pemBlocks(certPem).find((b) => b.type === 'CERTIFICATE');
  if (!block) throw new KubebootError('no certificate found in PEM');
  return subjectPublicKeyInfoOf(block.der);
}

/** Whether the first certificate in `certPem` certifies this key. */
export function keyMatchesCertificate(key: PrivateKey, certPem: string): boolean {
  return samePublicKey(key.publicKeyDer, publicKeyDerOfCertificate(certPem));
}
