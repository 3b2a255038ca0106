// spec.request is refused unless no parser could read it as another identity:
// the API server and the signer read it with Go, the approver with its own DER
// reader (agent/pki/der.ts), and where two parsers could differ the approver must not guess.
import t from 'tap';
import { decide } from '../../../agent/approver/decide.js';
import type { ApproverPolicy } from '../../../agent/approver/rules/rule.js';
import { requestFacts } from '../../../agent/approver/request.js';
import { KEY_ALGORITHMS } from '../../../agent/identity.js';
import { generateKey } from '../../../agent/pki/keys.js';
import { pemBlocks, toPem } from '../../../agent/pki/pem.js';
import { canonicalIp } from '../../../agent/pki/names.js';
import { createCsrPem } from '../../../agent/pki/pkcs10.js';
import { x509 } from '../../../agent/pki/x509.js';
import { ambiguousCsrPems, craftCsrPem } from '../../support/approver.js';

const base64 = (pem: string) => Buffer.from(pem).toString('base64');

t.test('a kube-proxy request as the kubelet and kubeboot write it is read', async (t) => {
  const facts = await requestFacts(base64(await craftCsrPem({ cn: 'system:kube-proxy' })));
  t.same(facts.subject, { commonName: 'system:kube-proxy', organizations: [] });
  t.ok(facts.signatureValid);
  const serving = await requestFacts(
    base64(await craftCsrPem({ cn: 'system:node:n1', o: ['system:nodes'], dns: ['n1'], ips: ['10.0.0.5'] })),
  );
  t.same(
    [serving.subject, serving.dnsNames, serving.ipAddresses],
    [{ commonName: 'system:node:n1', organizations: ['system:nodes'] }, ['n1'], ['10.0.0.5']],
  );
});

t.test('every request two parsers could read differently is refused, saying why', async (t) => {
  for (const { what, pem, why } of await ambiguousCsrPems()) {
    await t.rejects(requestFacts(base64(pem)), { message: why }, what);
  }
});

t.test('framing: only one canonical PEM block, nothing after the DER', async (t) => {
  const pem = await craftCsrPem({ cn: 'system:kube-proxy' });
  const der = pemBlocks(pem)[0]!.der;
  const cases: [string, string, RegExp][] = [
    ['bytes after the DER', toPem('CERTIFICATE REQUEST', new Uint8Array([...der, 0, 0])), /2 bytes after it/],
    ['a PEM header', pem.replace('-----\n', '-----\nProc-Type: 4,ENCRYPTED\n\n'), /not exactly one PEM/],
    ['text before the block', `junk\n${pem}`, /not exactly one PEM/],
    ['base64 with padding it does not need', pem.replace(/\n-----END/, '\n====\n-----END'), /not canonical base64/],
  ];
  for (const [what, text, why] of cases) await t.rejects(requestFacts(base64(text)), { message: why }, what);
});

t.test('decide reports a refused request as a request-signature violation naming why', async (t) => {
  const policy: ApproverPolicy = {
    kubeProxy: { commonName: 'system:kube-proxy', organizations: [] },
    maxExpirationSeconds: 86_400,
    keyAlgorithms: ['ecdsa-p256'],
    serving: { enabled: false, dnsSuffixes: [], ipCidrs: [] },
  };
  const lookups = {
    node: async (name: string) => ({ name, addresses: [] }),
    allowed: async () => true,
    sameRequester: () => [],
    apiServer: async () => ({ names: [], ips: [] }),
    record: async () => null,
    legacy: async () => null,
  };
  const [twoCns] = await ambiguousCsrPems();
  const csr = {
    metadata: { name: 'two-cns', uid: 'u1', creationTimestamp: '2026-12-01T00:00:00Z' },
    spec: {
      request: base64(twoCns!.pem),
      signerName: 'kubernetes.io/kube-apiserver-client',
      usages: ['digital signature', 'client auth'],
      username: 'system:node:n1',
      groups: ['system:nodes', 'system:authenticated'],
    },
  };
  const decision = await decide(csr, policy, lookups);
  t.match(decision, { kind: 'violation', rule: 'request-signature', message: /2 CNs in its subject/ });
});

t.test('the self-signature, checked on node:crypto, for every key kubeboot makes; a tampered request is not signed', async (t) => {
  for (const algorithm of KEY_ALGORITHMS) {
    const key = await generateKey(algorithm);
    const pem = await createCsrPem({ key, subject: { commonName: 'system:node:worker-1', organizations: ['system:nodes'] } });
    const facts = await requestFacts(base64(pem));
    t.equal(facts.signatureValid, true, `${algorithm}: signed by its key`);
    const der = new Uint8Array(pemBlocks(pem)[0]!.der);
    const at = Buffer.from(der).indexOf('worker-1');
    der[at + 7] = '2'.charCodeAt(0); // another node's name, the signature unchanged
    t.equal((await requestFacts(base64(toPem('CERTIFICATE REQUEST', der)))).signatureValid, false, `${algorithm}: subject changed`);
    const sig = new Uint8Array(pemBlocks(pem)[0]!.der);
    sig[sig.length - 1] = (sig[sig.length - 1] as number) ^ 0x01;
    t.equal((await requestFacts(base64(toPem('CERTIFICATE REQUEST', sig)))).signatureValid, false, `${algorithm}: signature changed`);
  }
});

t.test('the DER reader reads the subject, every SAN and the key as @peculiar/x509 does', async (t) => {
  const pem = await craftCsrPem({
    cn: 'system:node:n1',
    o: ['system:nodes', 'ops'],
    dns: ['n1', 'n1.example.com'],
    ips: ['10.0.0.5', '2001:db8::1', '::ffff:10.0.0.1'],
    emails: ['root@n1'],
    uris: ['spiffe://cluster/n1'],
    key: 'rsa-2048',
  });
  const facts = await requestFacts(base64(pem));
  const csr = new x509.Pkcs10CertificateRequest(pemBlocks(pem)[0]!.der);
  const san = new x509.SubjectAlternativeNameExtension(csr.extensions.find((e) => e.type === '2.5.29.17')!.rawData);
  const of = (type: string) => san.names.items.filter((n) => n.type === type).map((n) => n.value);
  t.same(facts.subject, { commonName: 'system:node:n1', organizations: ['system:nodes', 'ops'] });
  t.same(facts.dnsNames, of('dns'));
  t.same(facts.ipAddresses, of('ip').map(canonicalIp));
  t.same(facts.emailAddresses, of('email'));
  t.same(facts.uris, of('url'));
  t.same(facts.otherNames, []);
  t.same(facts.key, { kind: 'rsa', bits: 2048 });
  t.equal(facts.signatureValid, true);
});
