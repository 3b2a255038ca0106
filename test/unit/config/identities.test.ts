import t from 'tap';
import { identitiesFor } from '../../../agent/config/identities.js';
import { defaultConfig } from '../../../agent/config/defaults.js';

t.test('the kubelet client comes first, shaped for the csrapproving controller', async (t) => {
  const config = defaultConfig('worker-1');
  config.kubeProxy.enabled = false;
  t.same(identitiesFor(config), [
    {
      name: 'kubelet',
      subject: { commonName: 'system:node:worker-1', organizations: ['system:nodes'] },
      signerName: 'kubernetes.io/kube-apiserver-client-kubelet',
      usages: ['digital signature', 'client auth'],
      dnsNames: [],
      ipAddresses: [],
      certDir: '/var/lib/kubelet/pki',
      filePrefix: 'kubelet-client',
      kubeconfigPath: '/etc/kubernetes/kubelet.conf',
      hooks: [],
    },
  ]);
});

t.test('kube-proxy and kubelet serving follow when enabled, with RSA usages', async (t) => {
  const config = defaultConfig('worker-1');
  config.keyAlgorithm = 'rsa-2048';
  config.kubeProxy.organizations = ['team-a'];
  config.kubeProxy.hooks = [['systemctl', 'restart', 'kube-proxy']];
  config.kubeletServing.enabled = true;
  config.kubeletServing.ipAddresses = ['10.0.0.5'];
  const [kubelet, proxy, serving, extra] = identitiesFor(config);
  t.equal(extra, undefined);
  t.same(kubelet?.usages, ['digital signature', 'client auth', 'key encipherment']);
  t.same(proxy, {
    name: 'kube-proxy',
    subject: { commonName: 'system:kube-proxy', organizations: ['team-a'] },
    signerName: 'kubernetes.io/kube-apiserver-client',
    usages: ['digital signature', 'client auth', 'key encipherment'],
    dnsNames: [],
    ipAddresses: [],
    certDir: '/var/lib/kube-proxy/pki',
    filePrefix: 'kube-proxy-client',
    kubeconfigPath: '/etc/kubernetes/kube-proxy.conf',
    hooks: [['systemctl', 'restart', 'kube-proxy']],
  });
  t.same(serving, {
    name: 'kubelet-serving',
    subject: { commonName: 'system:node:worker-1', organizations: ['system:nodes'] },
    signerName: 'kubernetes.io/kubelet-serving',
    usages: ['digital signature', 'server auth', 'key encipherment'],
    dnsNames: ['worker-1'],
    ipAddresses: ['10.0.0.5'],
    certDir: '/var/lib/kubelet/pki',
    filePrefix: 'kubelet-server',
    kubeconfigPath: null,
    hooks: [],
  });
});

t.test('configured serving DNS names replace the node name', async (t) => {
  const config = defaultConfig('worker-1');
  config.kubeletServing.enabled = true;
  config.kubeletServing.dnsNames = ['w1.example.com'];
  t.same(identitiesFor(config).at(-1)?.dnsNames, ['w1.example.com']);
});

t.test('identities do not share arrays with the config', async (t) => {
  const config = defaultConfig('worker-1');
  const [kubelet] = identitiesFor(config);
  kubelet?.subject.organizations.push('x');
  t.same(identitiesFor(config)[0]?.subject.organizations, ['system:nodes']);
});
