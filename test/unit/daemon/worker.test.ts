// A worker's steps, in this process (daemon/worker.ts `Worker`): what it
// answers the daemon for an identity step, what it hands over to the next
// worker, and that a stopped step is not answered. Its IPC shell is proven
// with the daemon in test/e2e/daemon.test.ts and the kill-point campaign.
import { mkdir } from 'node:fs/promises';
import t, { type Test } from 'tap';
import { identitiesFor } from '../../../agent/config/identities.js';
import type { Config } from '../../../agent/config/types.js';
import { Worker } from '../../../agent/daemon/worker.js';
import { renderClientKubeconfig } from '../../../agent/kubeconfig/render.js';
import { silentLogger } from '../../../agent/log.js';
import { emptyRecord } from '../../../agent/renewal/record.js';
import { writeFileAtomic } from '../../../agent/store/atomic.js';
import { storeCredential } from '../../../agent/store/cert-store.js';
import { configIn } from '../../support/node-config.js';
import { createCa, issueLeaf } from '../../support/pki.js';

/** A node whose kubelet holds a valid certificate on disk, and a worker started on it with a fresh record. */
async function workerOn(t: Test, signal = new AbortController().signal): Promise<{ config: Config; worker: Worker; certPem: string }> {
  const config = configIn(t.testdir());
  config.kubeProxy.enabled = false;
  const ca = await createCa('worker-ca');
  const leaf = await issueLeaf(ca, { commonName: 'system:node:n1', organizations: ['system:nodes'], usage: 'client' });
  const kubelet = identitiesFor(config)[0]!;
  await mkdir(kubelet.certDir, { recursive: true });
  const stored = await storeCredential(kubelet, leaf.certPem, leaf.keyPem, new Date());
  await writeFileAtomic(
    config.kubelet.kubeconfig,
    renderClientKubeconfig({
      server: 'https://127.0.0.1:1',
      caPem: ca.certPem,
      certFile: stored.currentPath,
      keyFile: stored.currentPath,
      userName: 'default-auth',
      tlsServerName: null,
    }),
    { mode: 0o600 },
  );
  const worker = new Worker(
    {
      kind: 'start',
      config,
      records: [emptyRecord('kubelet')],
      handOver: { lastGoodKubelet: null, provenKubeletPem: null, trust: null },
      joinFirst: false,
    },
    silentLogger(),
    signal,
  );
  return { config, worker, certPem: leaf.certPem };
}

t.test('an identity step not due is answered by id with its record, when to look again, and the credential to hand over', async (t) => {
  const { worker, certPem } = await workerOn(t);
  const answer = await worker.run({ id: 7, target: 'kubelet', force: false });
  t.ok(answer, 'answered');
  t.equal(answer!.id, 7);
  t.equal(answer!.target, 'kubelet');
  t.ok(answer!.next !== null && Date.parse(answer!.next) > Date.now(), 'the next look is the renewal deadline, ahead');
  t.equal(answer!.record?.nextRenewal, answer!.next, 'the record says the same');
  t.same(answer!.wake, [], 'nothing issued: nobody else to wake');
  t.ok(answer!.handOver.lastGoodKubelet?.certPem.includes(certPem.trim()), 'the kubelet credential it saw valid goes to the next worker');
  t.equal(answer!.handOver.provenKubeletPem, null, 'it issued nothing, so proved nothing');
});

t.test('a step for an identity the configuration does not enable is not answered', async (t) => {
  const { worker } = await workerOn(t);
  t.equal(await worker.run({ id: 1, target: 'kube-proxy', force: false }), null);
});

t.test('a step of a stopped worker is not answered: the daemon hands it to the next worker', async (t) => {
  const stop = new AbortController();
  const { worker } = await workerOn(t, stop.signal);
  stop.abort(new Error('the worker was stopped'));
  const answer = await worker.run({ id: 2, target: 'kubelet', force: true });
  t.equal(answer, null);
});
