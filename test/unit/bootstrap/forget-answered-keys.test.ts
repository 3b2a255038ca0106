// forgetAnsweredKeys, right after a pass assessed the node: a pending key
// that a usable credential already holds (the
// issuance was stopped after storing credential and kubeconfig, before
// forgetting the key) is cleared; a pending key whose credential is not
// usable yet (its first kubeconfig not written) or that belongs to an
// issuance still in flight is kept, so the next attempt adopts its CSR.
import t from 'tap';
import { forgetAnsweredKeys } from '../../../agent/bootstrap/pass.js';
import { assessNode } from '../../../agent/credential/assess.js';
import { defaultConfig } from '../../../agent/config/defaults.js';
import { identitiesFor } from '../../../agent/config/identities.js';
import { currentCertPath } from '../../../agent/identity.js';
import { renderClientKubeconfig } from '../../../agent/kubeconfig/render.js';
import { createLineLogger } from '../../../agent/log-lines.js';
import { generateKey } from '../../../agent/pki/keys.js';
import { pendingKeyPath } from '../../../agent/store/pending-key.js';
import { memoryStore } from '../../support/memory-store.js';
import { createCa, issueLeaf } from '../../support/pki.js';

const ca = await createCa('cluster-ca');

async function node(o: { pendingIsCurrent: boolean; kubeconfigWritten: boolean }) {
  const config = defaultConfig('worker-1');
  config.kubeProxy.enabled = false;
  const store = memoryStore();
  const kubelet = identitiesFor(config)[0]!;
  const leaf = await issueLeaf(ca, { commonName: 'system:node:worker-1', organizations: ['system:nodes'], usage: 'client' });
  await store.update(kubelet, leaf.certPem, leaf.keyPem, new Date());
  if (o.kubeconfigWritten) {
    const current = currentCertPath(kubelet);
    await store.write(
      config.kubelet.kubeconfig,
      renderClientKubeconfig({
        server: 'https://api.test:6443',
        caPem: ca.certPem,
        certFile: current,
        keyFile: current,
        userName: 'default-auth',
        tlsServerName: null,
      }),
    );
  }
  const pending = o.pendingIsCurrent ? leaf.keyPem : (await generateKey('ecdsa-p256')).pem;
  await store.pendingKey.save(config.stateDir, kubelet.name, pending);
  const lines: string[] = [];
  const logger = createLineLogger({
    level: 'warn',
    format: 'json',
    stream: { write: (l: string) => lines.push(l) } as unknown as NodeJS.WritableStream,
  });
  await forgetAnsweredKeys(config, await assessNode(config, new Date(), undefined, store), store, logger);
  return { has: store.files.has(pendingKeyPath(config.stateDir, kubelet.name)), lines };
}

t.test('a pending key a usable credential holds is cleared, and said so', async (t) => {
  const after = await node({ pendingIsCurrent: true, kubeconfigWritten: true });
  t.notOk(after.has, 'the pending key is gone');
  t.match(after.lines.join(''), /the pending key is the current credential's/, 'one warning names what was cleared');
});

t.test('the same key while the first kubeconfig is not written yet is kept: the next attempt adopts its CSR', async (t) => {
  const after = await node({ pendingIsCurrent: true, kubeconfigWritten: false });
  t.ok(after.has, 'the pending key stays');
  t.same(after.lines, [], 'nothing to say');
});

t.test('a pending key of an issuance in flight is kept', async (t) => {
  const after = await node({ pendingIsCurrent: false, kubeconfigWritten: true });
  t.ok(after.has, 'the pending key stays');
  t.same(after.lines, [], 'nothing to say');
});
