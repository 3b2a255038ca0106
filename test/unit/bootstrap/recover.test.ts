// recoverNode: what a crash left half done is put right before a pass judges
// anything. Here: a pending key the current credential already holds (the
// issuance was stopped after storing the credential, before forgetting the
// key) is cleared; a pending key of an issuance still in flight is kept.
import t from 'tap';
import { recoverNode } from '../../../agent/bootstrap/pass.js';
import { defaultConfig } from '../../../agent/config/defaults.js';
import { identitiesFor } from '../../../agent/config/identities.js';
import { createLineLogger } from '../../../agent/log-lines.js';
import { generateKey } from '../../../agent/pki/keys.js';
import { pendingKeyPath } from '../../../agent/store/pending-key.js';
import { FakeClock } from '../../../agent/time/clock.js';
import { memoryStore } from '../../support/memory-store.js';
import { createCa, issueLeaf } from '../../support/pki.js';

const ca = await createCa('cluster-ca');

async function node(pendingIsCurrent: boolean) {
  const config = defaultConfig('worker-1');
  const store = memoryStore();
  const kubelet = identitiesFor(config)[0]!;
  const leaf = await issueLeaf(ca, { commonName: 'system:node:worker-1', organizations: ['system:nodes'], usage: 'client' });
  await store.update(kubelet, leaf.certPem, leaf.keyPem, new Date());
  const pending = pendingIsCurrent ? leaf.keyPem : (await generateKey('ecdsa-p256')).pem;
  await store.pendingKey.save(config.stateDir, kubelet.name, pending);
  const lines: string[] = [];
  const logger = createLineLogger({
    level: 'warn',
    format: 'json',
    stream: { write: (l: string) => lines.push(l) } as unknown as NodeJS.WritableStream,
  });
  await recoverNode(config, { logger, clock: new FakeClock(), signal: new AbortController().signal, store });
  return { has: store.files.has(pendingKeyPath(config.stateDir, kubelet.name)), lines };
}

t.test('a pending key the current credential holds is cleared, and said so', async (t) => {
  const after = await node(true);
  t.notOk(after.has, 'the pending key is gone');
  t.match(after.lines.join(''), /the pending key is the current credential's/, 'one warning names what was cleared');
});

t.test('a pending key of an issuance in flight is kept: a restart adopts that CSR', async (t) => {
  const after = await node(false);
  t.ok(after.has, 'the pending key stays');
  t.same(after.lines, [], 'nothing to say');
});
