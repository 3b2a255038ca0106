import t from 'tap';
import {
  renderBootstrapKubeconfig,
  renderClientKubeconfig,
  renderEmbeddedKubeconfig,
  renderIdentityKubeconfig,
} from '../../../agent/kubeconfig/render.js';
import { parseClientKubeconfig } from '../../../agent/kubeconfig/parse.js';
import { kubeletIdentity } from '../../support/identity.js';

const CA = '-----BEGIN CERTIFICATE-----\nMIIBfakeCA\n-----END CERTIFICATE-----\n';
const CURRENT = '/var/lib/kubelet/pki/kubelet-client-current.pem';
const PEM =
  '-----BEGIN CERTIFICATE-----\nMIIBleaf\n-----END CERTIFICATE-----\n-----BEGIN EC PRIVATE KEY-----\nMHcC\n-----END EC PRIVATE KEY-----\n';
const opts = { server: 'https://10.0.0.1:6443', caPem: CA, certFile: CURRENT, keyFile: CURRENT, userName: 'default-auth' };

t.test('renders a kubeadm-shaped kubelet.conf pointing at the -current.pem link', async (t) => {
  const b64 = Buffer.from(CA).toString('base64');
  t.equal(
    renderClientKubeconfig(opts),
    [
      'apiVersion: v1',
      'clusters:',
      '- cluster:',
      `    certificate-authority-data: ${b64}`,
      '    server: https://10.0.0.1:6443',
      '  name: default-cluster',
      'contexts:',
      '- context:',
      '    cluster: default-cluster',
      '    namespace: default',
      '    user: default-auth',
      '  name: default-context',
      'current-context: default-context',
      'kind: Config',
      'preferences: {}',
      'users:',
      '- name: default-auth',
      '  user:',
      `    client-certificate: ${CURRENT}`,
      `    client-key: ${CURRENT}`,
      '',
    ].join('\n'),
  );
});

t.test('output is deterministic', async (t) => {
  t.equal(renderClientKubeconfig({ ...opts }), renderClientKubeconfig({ ...opts }));
});

t.test('round-trips through parseClientKubeconfig, tls-server-name included', async (t) => {
  const text = renderClientKubeconfig({ ...opts, tlsServerName: 'kubernetes.default', clusterName: 'prod' });
  const parsed = await parseClientKubeconfig('/etc/kubernetes/kubelet.conf', text, async (p) => (p === CURRENT ? PEM : null));
  t.same(parsed, {
    file: '/etc/kubernetes/kubelet.conf',
    server: 'https://10.0.0.1:6443',
    caPem: CA,
    insecureSkipTlsVerify: false,
    tlsServerName: 'kubernetes.default',
    certPem: PEM,
    keyPem: PEM,
  });
});

t.test('refuses relative credential paths, which clients would resolve against the kubeconfig directory', async (t) => {
  t.throws(() => renderClientKubeconfig({ ...opts, keyFile: 'pki/key.pem' }), {
    message: 'kubeconfig credential path must be absolute, got pki/key.pem',
  });
});

t.test("an embedded kubeconfig (the approver's) carries the certificate and key as data, no paths", async (t) => {
  const key = '-----BEGIN EC PRIVATE KEY-----\nMHcC\n-----END EC PRIVATE KEY-----\n';
  const cert = '-----BEGIN CERTIFICATE-----\nMIIBleaf\n-----END CERTIFICATE-----\n';
  const text = renderEmbeddedKubeconfig({
    server: 'https://10.0.0.1:6443',
    caPem: CA,
    userName: 'kubeboot:approver',
    certPem: cert,
    keyPem: key,
  });
  t.match(text, `    client-certificate-data: ${Buffer.from(cert).toString('base64')}\n`);
  t.match(text, `    client-key-data: ${Buffer.from(key).toString('base64')}\n`);
  t.match(text, '- name: kubeboot:approver\n');
  t.notMatch(text, /client-certificate:|client-key:/, 'no file references');
});

t.test("an identity's kubeconfig names its -current.pem as certificate and key, as issuance and a CA rotation both write it", async (t) => {
  const identity = kubeletIdentity({ certDir: '/var/lib/kubelet/pki' });
  t.equal(
    renderIdentityKubeconfig(identity, { server: opts.server, caPem: CA, tlsServerName: 'kubernetes.default' }),
    renderClientKubeconfig({ ...opts, tlsServerName: 'kubernetes.default' }),
  );
  t.equal(renderIdentityKubeconfig(identity, { server: opts.server, caPem: CA }), renderClientKubeconfig(opts), 'no server name: none');
});

t.test('a bootstrap kubeconfig has the same shape, with the token or the token file as its user', async (t) => {
  const withFile = renderBootstrapKubeconfig({
    server: 'https://10.0.0.1:6443/',
    caPem: CA,
    credential: { tokenFile: '/etc/kubernetes/bootstrap-token' },
  });
  t.match(withFile, /^ {4}server: https:\/\/10\.0\.0\.1:6443\n/m, 'the trailing slash dropped');
  t.match(withFile, /^users:\n- name: kubeboot-bootstrap\n {2}user:\n {4}tokenFile: \/etc\/kubernetes\/bootstrap-token\n$/m);
  t.match(
    renderBootstrapKubeconfig({ server: opts.server, caPem: CA, credential: { token: 'abcdef.0123456789abcdef' } }),
    /^ {4}token: abcdef\.0123456789abcdef\n/m,
  );
});
