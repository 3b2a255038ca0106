// After a renewal (credential/renew.ts finishRenewal): the old credentials
// beyond the identity's retention go, through the Store the pass was given,
// and never the current one. The files are in memory (memoryStore); the
// prune on disk is test/unit/store/cert-store.test.ts's.
import t from 'tap';
import { IDENTITY_ROLES } from '../../../agent/config/identities.js';
import { defaultConfig } from '../../../agent/config/defaults.js';
import { finishRenewal } from '../../../agent/credential/renew.js';
import type { Identity } from '../../../agent/identity.js';
import { silentLogger } from '../../../agent/log.js';
import { kubeletIdentity } from '../../support/identity.js';
import { memoryStore } from '../../support/memory-store.js';

const config = defaultConfig('worker-1');
const deps = { logger: silentLogger() };
const t0 = Date.UTC(2025, 0, 2, 3, 4, 5);
const client = kubeletIdentity({ certDir: '/pki', kubeconfigPath: null });
const serving: Identity = { ...client, name: 'kubelet-serving', ...IDENTITY_ROLES['kubelet-serving'], filePrefix: 'kubelet-server' };
const credentialFiles = (files: Map<string, string>, identity: Identity) =>
  [...files.keys()].filter((f) => f.startsWith(`/pki/${identity.filePrefix}-2`)).sort();

async function renewedEightTimes(identity: Identity) {
  const store = memoryStore();
  for (let i = 0; i < 8; i++) await store.update(identity, `cert ${i}\n`, `key ${i}\n`, new Date(t0 + i * 3600_000));
  return store;
}

t.test("each identity keeps its retention's newest files (the client 5, the serving identity only the current one)", async (t) => {
  for (const identity of [client, serving]) {
    const store = await renewedEightTimes(identity);
    t.same(await finishRenewal(config, identity, { ...deps, store }), [], `${identity.name}: no hooks, none run`);
    const kept = credentialFiles(store.files, identity);
    t.equal(kept.length, Math.max(identity.keepOld, 1), `${identity.name}: keeps ${identity.keepOld}, the current among them`);
    t.equal(store.files.get(kept.at(-1)!), store.files.get(`/pki/${identity.filePrefix}-current.pem`), 'the newest is the current');
  }
});

t.test('a credential rolled back to by hand is kept though it is old', async (t) => {
  const store = await renewedEightTimes(serving);
  const oldest = credentialFiles(store.files, serving)[0]!;
  store.files.set(`/pki/${serving.filePrefix}-current.pem`, store.files.get(oldest)!);
  await finishRenewal(config, serving, { ...deps, store });
  t.same(credentialFiles(store.files, serving), [oldest]);
});
