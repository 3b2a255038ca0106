import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { IDENTITY_ROLES, consumerRestarts, identitiesFor, nodeIdentity } from '../../../agent/config/identities.js';
import { defaultConfig } from '../../../agent/config/defaults.js';

t.test('what differs between the identities is one table', async (t) => {
  t.same(IDENTITY_ROLES, {
    // The node's own credential: bootstrapped with the token, restarts the kubelet after a CA change, holds READY=1.
    kubelet: { requester: 'bootstrap-token', consumer: 'kubelet', keepOld: 5, holdsReady: true, rotatedByKubelet: true },
    'kube-proxy': { requester: 'node-credential', consumer: 'kube-proxy', keepOld: 5, holdsReady: false, rotatedByKubelet: false },
    // No kubeconfig, so nothing to restart; no old file, so the kubelet's inotify watch reloads.
    'kubelet-serving': { requester: 'node-credential', consumer: null, keepOld: 0, holdsReady: false, rotatedByKubelet: false },
  });
  const config = defaultConfig('worker-1');
  config.kubeletServing.enabled = true;
  for (const identity of identitiesFor(config)) t.match(identity, IDENTITY_ROLES[identity.name], `${identity.name} carries its row`);
  t.equal(nodeIdentity(config).name, 'kubelet', 'exactly one identity is bootstrapped with the token, and it proves the node');
  t.equal(identitiesFor(config).filter((i) => i.requester === 'bootstrap-token').length, 1);
  config.caRotation.kubeletRestart = [['restart', 'kubelet']];
  config.caRotation.kubeProxyRestart = [['restart', 'kube-proxy']];
  t.same(consumerRestarts(config), [
    { consumer: 'kubelet', restart: [['restart', 'kubelet']] },
    { consumer: 'kube-proxy', restart: [['restart', 'kube-proxy']] },
  ]);
});

/** Decisions by an identity's name left outside config/, each with the reason it stays for now. */
const NAME_BRANCHES: Record<string, string> = {};

t.test('no module outside config/ decides by an identity name: a new identity inherits no behaviour', async (t) => {
  const root = new URL('../../../agent/', import.meta.url).pathname;
  const files = (await readdir(root, { recursive: true })).filter((f) => f.endsWith('.ts') && !f.startsWith('config/'));
  const branching: string[] = [];
  for (const file of files) {
    const text = await readFile(join(root, file), 'utf8');
    if (/\b(?:name|identity)\s*[!=]==\s*'(?:kubelet|kube-proxy|kubelet-serving)'/.test(text)) branching.push(file);
  }
  t.same(branching.filter((f) => !(f in NAME_BRANCHES)).sort(), [], 'read a field of IDENTITY_ROLES (config/identities.ts) instead');
  t.same(
    Object.keys(NAME_BRANCHES).filter((f) => !branching.includes(f)),
    [],
    'every listed module still branches (else drop it)',
  );
});

t.test('the kubelet client comes first, shaped for the csrapproving controller', async (t) => {
  const config = defaultConfig('worker-1');
  config.kubeProxy.enabled = false;
  t.same(identitiesFor(config), [
    {
      name: 'kubelet',
      requester: 'bootstrap-token',
      consumer: 'kubelet',
      keepOld: 5,
      holdsReady: true,
      rotatedByKubelet: true,
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
    requester: 'node-credential',
    consumer: 'kube-proxy',
    keepOld: 5,
    holdsReady: false,
    rotatedByKubelet: false,
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
    requester: 'node-credential',
    consumer: null,
    keepOld: 0,
    holdsReady: false,
    rotatedByKubelet: false,
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
