import { webcrypto } from 'node:crypto';
import t from 'tap';
import { requestFacts } from '../../../agent/approver/request.js';
import { toPem } from '../../../agent/pki/pem.js';
import { parseCsrDer, verifyWithNodeCrypto } from '../../../agent/pki/pkcs10.js';
import { x509 } from '../../../agent/pki/x509.js';

// The self-signature checked on node:crypto must say what csr.verify() (WebCrypto) says,
// and so must the approver's (agent/approver/request.ts, read with pki/der.ts).

type Params = { name: string } & Record<string, unknown>;
type Alg = { label: string; keyGen: Params; signing: Params };
const rsa = (hash: string): Params => ({ name: 'RSASSA-PKCS1-v1_5', modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash });
const accepted: Alg[] = [
  { label: 'RSA PKCS#1 v1.5 SHA-256', keyGen: rsa('SHA-256'), signing: { name: 'RSASSA-PKCS1-v1_5' } },
  { label: 'RSA PKCS#1 v1.5 SHA-384', keyGen: rsa('SHA-384'), signing: { name: 'RSASSA-PKCS1-v1_5' } },
  { label: 'RSA PKCS#1 v1.5 SHA-512', keyGen: rsa('SHA-512'), signing: { name: 'RSASSA-PKCS1-v1_5' } },
  { label: 'RSA PKCS#1 v1.5 SHA-1', keyGen: rsa('SHA-1'), signing: { name: 'RSASSA-PKCS1-v1_5' } },
  { label: 'ECDSA P-256 SHA-256', keyGen: { name: 'ECDSA', namedCurve: 'P-256' }, signing: { name: 'ECDSA', hash: 'SHA-256' } },
  { label: 'ECDSA P-384 SHA-384', keyGen: { name: 'ECDSA', namedCurve: 'P-384' }, signing: { name: 'ECDSA', hash: 'SHA-384' } },
  { label: 'ECDSA P-256 SHA-384', keyGen: { name: 'ECDSA', namedCurve: 'P-256' }, signing: { name: 'ECDSA', hash: 'SHA-384' } },
  { label: 'ECDSA P-521 SHA-512', keyGen: { name: 'ECDSA', namedCurve: 'P-521' }, signing: { name: 'ECDSA', hash: 'SHA-512' } },
];

async function csrDer(alg: Alg, cn = 'system:node:worker-1'): Promise<Uint8Array> {
  const keys = (await webcrypto.subtle.generateKey(alg.keyGen as never, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const csr = await x509.Pkcs10CertificateRequestGenerator.create(
    { name: `CN=${cn}, O=system:nodes`, keys: keys as never, signingAlgorithm: alg.signing },
    webcrypto as never,
  );
  return new Uint8Array(csr.rawData);
}

/** tag, header length and content of the DER value at `at`. */
function tlv(der: Uint8Array, at: number): { tag: number; start: number; end: number } {
  const tag = der[at] as number;
  let len = der[at + 1] as number;
  let start = at + 2;
  if (len & 0x80) {
    const n = len & 0x7f;
    len = 0;
    for (let i = 0; i < n; i++) len = len * 256 + (der[start + i] as number);
    start += n;
  }
  return { tag, start, end: start + len };
}
function encode(tag: number, content: Uint8Array): Uint8Array {
  const n = content.length;
  const len = n < 0x80 ? [n] : n < 0x100 ? [0x81, n] : [0x82, n >> 8, n & 0xff];
  return new Uint8Array([tag, ...len, ...content]);
}
/** The request's three parts: CertificationRequestInfo and AlgorithmIdentifier (whole TLVs), the signature (BIT STRING content after its unused-bits byte). */
function parts(der: Uint8Array): { tbs: Uint8Array; alg: Uint8Array; signature: Uint8Array } {
  const outer = tlv(der, 0);
  const tbs = tlv(der, outer.start);
  const alg = tlv(der, tbs.end);
  const sig = tlv(der, alg.end);
  return { tbs: der.slice(outer.start, tbs.end), alg: der.slice(tbs.end, alg.end), signature: der.slice(sig.start + 1, sig.end) };
}
function assemble(p: { tbs: Uint8Array; alg: Uint8Array; signature: Uint8Array }): Uint8Array {
  return encode(0x30, new Uint8Array([...p.tbs, ...p.alg, ...encode(0x03, new Uint8Array([0, ...p.signature]))]));
}
function replaceBytes(der: Uint8Array, from: string, to: string): Uint8Array {
  const hay = Buffer.from(der);
  const at = hay.indexOf(from);
  if (at < 0 || from.length !== to.length) throw new Error('not found');
  const out = new Uint8Array(der);
  out.set(Buffer.from(to), at);
  return out;
}
async function both(der: Uint8Array): Promise<{ node: boolean | undefined; web: boolean; parsed: boolean }> {
  const csr = new x509.Pkcs10CertificateRequest(der);
  const node = verifyWithNodeCrypto(csr);
  let web: boolean;
  try {
    web = await csr.verify(webcrypto as never);
  } catch {
    web = false;
  }
  const parsed = (await parseCsrDer(der)).signatureValid;
  const approver = (await requestFacts(Buffer.from(toPem('CERTIFICATE REQUEST', der)).toString('base64'))).signatureValid;
  if (approver !== parsed) throw new Error(`the approver reads the signature as ${approver}, parseCsrDer as ${parsed}`);
  return { node, web, parsed };
}

for (const alg of accepted) {
  t.test(`${alg.label}: verified on node:crypto, as WebCrypto does`, async (t) => {
    const der = await csrDer(alg);
    t.same(await both(der), { node: true, web: true, parsed: true }, 'a genuine request');

    const otherSubject = replaceBytes(der, 'worker-1', 'worker-2');
    t.same(await both(otherSubject), { node: false, web: false, parsed: false }, 'its subject changed');

    const p = parts(der);
    const sig = new Uint8Array(p.signature);
    sig[sig.length - 1] = (sig[sig.length - 1] as number) ^ 0x01;
    t.same(await both(assemble({ ...p, signature: sig })), { node: false, web: false, parsed: false }, 'its signature changed');

    const other = parts(await csrDer(alg));
    t.same(
      await both(assemble({ ...p, signature: other.signature })),
      { node: false, web: false, parsed: false },
      "another key's signature",
    );
    t.same(
      await both(assemble({ ...other, tbs: p.tbs, signature: other.signature })),
      { node: false, web: false, parsed: false },
      'signed by another key',
    );
  });
}

t.test('an ECDSA signature is DER (X.509), not IEEE-P1363 r||s (WebCrypto), and only strict DER', async (t) => {
  const der = await csrDer(accepted[4]!);
  const p = parts(der);
  const seq = tlv(p.signature, 0);
  const r = tlv(p.signature, seq.start);
  const s = tlv(p.signature, r.end);
  const int = (v: { start: number; end: number }) => {
    let b = p.signature.slice(v.start, v.end);
    while (b.length > 1 && b[0] === 0) b = b.slice(1);
    return b;
  };
  const pad = (b: Uint8Array) => new Uint8Array([...new Uint8Array(32 - b.length), ...b]);
  const p1363 = new Uint8Array([...pad(int(r)), ...pad(int(s))]);
  const asP1363 = await both(assemble({ ...p, signature: p1363 }));
  t.equal(asP1363.node, false, 'a raw r||s signature is refused');
  t.equal(asP1363.parsed, false);

  // r with a needless leading 0x00: BER, not DER (Go's ecdsa.VerifyASN1 and OpenSSL refuse it)
  const rBytes = p.signature.slice(r.start, r.end);
  const loose = encode(0x30, new Uint8Array([...encode(0x02, new Uint8Array([0, ...rBytes])), ...p.signature.slice(r.end, s.end)]));
  t.equal((await both(assemble({ ...p, signature: loose }))).parsed, false, 'a non-minimal INTEGER is refused');
  const trailing = new Uint8Array([...p.signature, 0]);
  t.equal((await both(assemble({ ...p, signature: trailing }))).parsed, false, 'bytes after the signature SEQUENCE are refused');
});

t.test('other algorithms and mismatched keys are left to WebCrypto', async (t) => {
  const pss = await csrDer({
    label: 'RSA-PSS',
    keyGen: { name: 'RSA-PSS', modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: 'SHA-256' },
    signing: { name: 'RSA-PSS', saltLength: 32 },
  });
  const r = await both(pss);
  t.equal(r.node, undefined, 'RSA-PSS is not checked on node:crypto');
  t.equal(r.parsed, r.web, 'parseCsrDer says what WebCrypto says');

  // an ECDSA-signed request claiming sha256WithRSAEncryption: the key type does not match the algorithm
  const ec = parts(await csrDer(accepted[4]!));
  const rsaAlg = parts(await csrDer(accepted[0]!)).alg;
  const mismatched = await both(assemble({ ...ec, alg: rsaAlg }));
  t.equal(mismatched.node, undefined);
  t.equal(mismatched.parsed, false);
  t.equal(mismatched.web, false);

  // an RSA-signed request claiming ecdsa-with-SHA256
  const rs = parts(await csrDer(accepted[0]!));
  const mismatched2 = await both(assemble({ ...rs, alg: ec.alg }));
  t.equal(mismatched2.node, undefined);
  t.equal(mismatched2.parsed, false);
});
