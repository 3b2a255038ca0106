// "Is the credential on disk still usable?" for each identity, with the
// files in memory (memoryStore): a table over what can be missing or wrong.
import t from 'tap';
import { defaultConfig } from '../../../agent/config/defaults.js';
import { identitiesFor } from '../../../agent/config/identities.js';
import { assessIdentity, assessNode } from '../../../agent/credential/assess.js';
import { currentCertPath, type Identity } from '../../../agent/identity.js';
import { renderClientKubeconfig } from '../../../agent/kubeconfig/render.js';
import { memoryStore } from '../../support/memory-store.js';
import { createCa, issueLeaf } from '../../support/pki.js';

const SERVER = 'https://api.test:6443';
const now = new Date();
const hour = 3600_000;
const config = defaultConfig('worker-1');
config.kubeletServing.enabled = true;
const [kubelet, , serving] = identitiesFor(config) as [Identity, Identity, Identity];
const ca = await createCa('cluster-ca');
const otherCa = await createCa('another-ca');

const credential = async (identity: Identity, o: { signer?: typeof ca; notAfter?: Date; commonName?: string } = {}) => {
  const leaf = await issueLeaf(o.signer ?? ca, {
    commonName: o.commonName ?? identity.subject.commonName,
    organizations: identity.subject.organizations,
    usage: identity === serving ? 'server' : 'client',
    notBefore: new Date(now.getTime() - hour),
    notAfter: o.notAfter ?? new Date(now.getTime() + 24 * hour),
  });
  return `${leaf.certPem.trim()}\n${leaf.keyPem}`;
};
const kubeconfig = (caPem: string | null) => {
  const text = renderClientKubeconfig({
    server: SERVER,
    caPem: caPem ?? ca.certPem,
    certFile: currentCertPath(kubelet),
    keyFile: currentCertPath(kubelet),
    userName: 'default-auth',
  });
  return caPem === null ? text.replace(/^\s*certificate-authority-data: .*\n/m, '') : text;
};
const onDisk = async (o: { kubeconfig?: string | null; current?: string | null } = {}) => {
  const files: Record<string, string> = {};
  if (o.kubeconfig !== null) files[kubelet.kubeconfigPath!] = o.kubeconfig ?? kubeconfig(ca.certPem);
  if (o.current !== null) files[currentCertPath(kubelet)] = o.current ?? (await credential(kubelet));
  return memoryStore(files);
};

t.test("the kubelet's credential, by what is on disk", async (t) => {
  const rows: [string, Promise<ReturnType<typeof memoryStore>>, RegExp | 'usable', boolean][] = [
    ['valid, chained to the CA its kubeconfig names', onDisk(), 'usable', true],
    ['no kubeconfig', onDisk({ kubeconfig: null }), /kubelet\.conf does not exist/, false],
    ['a kubeconfig naming no CA', onDisk({ kubeconfig: kubeconfig(null) }), /names no certificate authority/, false],
    [
      'the certificate its kubeconfig names is gone',
      onDisk({ current: null }),
      /client-certificate: file not found: .*kubelet-client-current\.pem/,
      false,
    ],
    [
      'expired',
      onDisk({ current: await credential(kubelet, { notAfter: new Date(now.getTime() - 1) }) }),
      /^certificate expired at /,
      true,
    ],
    [
      'signed by another CA',
      onDisk({ current: await credential(kubelet, { signer: otherCa }) }),
      /issuer CN=another-ca\) is not signed by the cluster CA/,
      true,
    ],
    [
      'another node',
      onDisk({ current: await credential(kubelet, { commonName: 'system:node:worker-2' }) }),
      /is for CN=system:node:worker-2, .*configured CN=system:node:worker-1/,
      true,
    ],
  ];
  for (const [name, store, want, clusterKnown] of rows) {
    const a = await assessIdentity(kubelet, now, null, await store);
    if (want === 'usable') t.equal(a.state, 'usable', name);
    else t.match(a, { state: 'unusable', reason: want }, name);
    t.equal(
      a.cluster?.caPem === ca.certPem,
      clusterKnown,
      `${name}: the cluster ${clusterKnown ? 'is' : 'is not'} known from its kubeconfig`,
    );
  }
});

t.test('the serving certificate has no kubeconfig: it is checked against the CA the kubelet names', async (t) => {
  const store = await onDisk();
  t.match(await assessIdentity(serving, now, ca.certPem, store), { state: 'unusable', reason: /no kubelet-server-current\.pem in/ });
  store.files.set(currentCertPath(serving), await credential(serving));
  t.match(await assessIdentity(serving, now, null, store), { state: 'unusable', reason: 'the cluster CA is not known yet' });
  const node = await assessNode(config, now, null, store);
  t.same(
    [node.kubelet, ...node.others].map((a) => [a.identity.name, a.state]),
    [
      ['kubelet', 'usable'],
      ['kube-proxy', 'unusable'],
      ['kubelet-serving', 'usable'],
    ],
    "assessNode hands the kubelet's CA to the serving certificate",
  );
});
