// The floor for `make bench`: a TLS bootstrap done with nothing but Node's
// built-in modules (node:https, node:crypto's key generation, signing and
// X509Certificate), to show what this runtime itself costs next to the
// kubelet's Go LoadClientCert, before any library is loaded. It is a measuring
// stick, not a second implementation: no YAML (the kubeconfig is read with
// regular expressions and must be the simple one the test plane writes), no
// retries, no pending key, no kubeconfig written, errors just thrown.
//
// Same wire path as kubeboot: POST the CSR, GET it by field selector, watch
// from that resourceVersion until it carries a certificate, check the
// certificate against the key and the CA, write it with the key (temp file,
// fsync, rename, directory fsync), prove it with one SelfSubjectReview.
//
//   node node-floor.mjs BOOTSTRAP_KUBECONFIG CERT_DIR NODE_NAME
import { createHash, generateKeyPairSync, sign, X509Certificate } from 'node:crypto';
import { closeSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, writeSync } from 'node:fs';
import https from 'node:https';

const [kubeconfigFile, certDir, nodeName] = process.argv.slice(2);
const kubeconfig = readFileSync(kubeconfigFile, 'utf8');
const field = (name) => kubeconfig.match(new RegExp(`${name}: (\\S+)`))?.[1] ?? fail(`no ${name} in ${kubeconfigFile}`);
const server = field('server');
const caPem = Buffer.from(field('certificate-authority-data'), 'base64').toString('utf8');
const token = field('token');

function fail(message) {
  throw new Error(message);
}

// DER for the one PKCS#10 request this needs: P-256 key, O and CN, no attributes.
const tlv = (tag, ...parts) => {
  const body = Buffer.concat(parts);
  const n = body.length;
  const length = n < 0x80 ? [n] : n < 0x100 ? [0x81, n] : [0x82, n >> 8, n & 0xff];
  return Buffer.concat([Buffer.from([tag, ...length]), body]);
};
const oid = (hex) => tlv(0x06, Buffer.from(hex, 'hex'));
const attribute = (type, value) => tlv(0x31, tlv(0x30, oid(type), tlv(0x0c, Buffer.from(value))));
const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
const info = tlv(
  0x30,
  tlv(0x02, Buffer.from([0])),
  tlv(0x30, attribute('55040a', 'system:nodes'), attribute('550403', `system:node:${nodeName}`)),
  publicKey.export({ type: 'spki', format: 'der' }),
  Buffer.from([0xa0, 0x00]),
);
const csr = tlv(
  0x30,
  info,
  tlv(0x30, oid('2a8648ce3d040302')),
  tlv(0x03, Buffer.from([0]), sign('sha256', info, { key: privateKey, dsaEncoding: 'der' })),
);
const csrPem = `-----BEGIN CERTIFICATE REQUEST-----\n${csr.toString('base64').replace(/.{64}/g, '$&\n')}\n-----END CERTIFICATE REQUEST-----\n`;
const name = `node-csr-${createHash('sha256').update(csr).digest('base64url')}`;

const bootstrapAgent = new https.Agent({ ca: caPem, keepAlive: true });
const csrs = '/apis/certificates.k8s.io/v1/certificatesigningrequests';

/** One request; resolves with the status and body, or with the first watch event that `until` accepts. */
function call(method, path, { body, agent = bootstrapAgent, bearer = true, until } = {}) {
  return new Promise((resolve, reject) => {
    const headers = {
      accept: 'application/json',
      'content-type': 'application/json',
      ...(bearer ? { authorization: `Bearer ${token}` } : {}),
    };
    const req = https.request(server + path, { method, agent, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => {
        text += chunk;
        if (!until) return;
        for (let i; (i = text.indexOf('\n')) >= 0; text = text.slice(i + 1)) {
          const found = until(JSON.parse(text.slice(0, i)));
          if (found) {
            resolve(found);
            req.destroy();
            return;
          }
        }
      });
      res.on('end', () => (until ? reject(new Error('watch ended')) : resolve({ status: res.statusCode, body: text })));
    });
    req.on('error', reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

const created = await call('POST', csrs, {
  body: {
    apiVersion: 'certificates.k8s.io/v1',
    kind: 'CertificateSigningRequest',
    metadata: { name },
    spec: {
      request: Buffer.from(csrPem).toString('base64'),
      signerName: 'kubernetes.io/kube-apiserver-client-kubelet',
      usages: ['digital signature', 'client auth'],
    },
  },
});
if (created.status !== 201) fail(`create: ${created.status}`);
const selector = `fieldSelector=${encodeURIComponent(`metadata.name=${name}`)}`;
const list = JSON.parse((await call('GET', `${csrs}?${selector}`)).body);
const issued =
  list.items[0]?.status?.certificate ??
  (await call('GET', `${csrs}?watch=1&${selector}&resourceVersion=${list.metadata.resourceVersion}`, {
    until: (event) => event.object?.status?.certificate,
  }));
const certPem = Buffer.from(issued, 'base64').toString('utf8');
const cert = new X509Certificate(certPem);
if (!cert.checkPrivateKey(privateKey) || !cert.verify(new X509Certificate(caPem).publicKey)) fail('issued certificate does not match');

const keyPem = privateKey.export({ type: 'sec1', format: 'pem' });
mkdirSync(certDir, { recursive: true, mode: 0o700 });
const file = `${certDir}/kubelet-client-current.pem`;
const fd = openSync(`${file}.tmp`, 'w', 0o600);
writeSync(fd, certPem + keyPem);
fsyncSync(fd);
closeSync(fd);
renameSync(`${file}.tmp`, file);
const dir = openSync(certDir, 'r');
fsyncSync(dir);
closeSync(dir);

const proof = await call('POST', '/apis/authentication.k8s.io/v1/selfsubjectreviews', {
  body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' },
  agent: new https.Agent({ ca: caPem, cert: certPem, key: keyPem }),
  bearer: false,
});
if (proof.status !== 201 || JSON.parse(proof.body).status.userInfo.username !== `system:node:${nodeName}`) fail(`proof: ${proof.status}`);
bootstrapAgent.destroy();
