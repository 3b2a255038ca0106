// The resting daemon's own look at kube-public/cluster-info: the decisions
// (daemon/ca-look.ts) as tables, and the one GET (daemon/ca-look-get.ts)
// against a local mTLS server. The daemon's use of both is in
// daemon.test.ts; the real control plane in test/e2e/daemon.test.ts.
import { writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import t from 'tap';
import { afterLook, atLookTime, type LookResult } from '../../../agent/daemon/ca-look.js';
import { lookAtClusterInfo } from '../../../agent/daemon/ca-look-get.js';
import { clusterInfoDigest } from '../../../agent/kube/cluster-info-digest.js';
import type { CaLook } from '../../../agent/trust/keeper.js';
import { createCa, issueLeaf } from '../../support/pki.js';
import { caLookAt } from '../../support/ca-look.js';

const NOW = new Date('2025-06-01T00:00:00Z');
const MIN = 60_000;
const look: CaLook = caLookAt(NOW, new Date(NOW.getTime() + 30 * 24 * 60 * MIN));

t.test('at a look’s time: a look while it stands in for the keeper, a worker from the moment a CA or statement expires', async (t) => {
  const rows: [string, Date, 'look' | 'worker'][] = [
    ['well before the horizon', NOW, 'look'],
    ['a millisecond before it', new Date(Date.parse(look.until) - 1), 'look'],
    ['at it', new Date(look.until), 'worker'],
    ['after it', new Date(Date.parse(look.until) + MIN), 'worker'],
  ];
  for (const [what, now, want] of rows) t.equal(atLookTime(look, now).kind, want, what);
});

t.test('after a look: the same digest waits for the next, anything else starts a worker', async (t) => {
  const input = (random: number) => ({ now: NOW, intervalMs: 10 * MIN, random: () => random });
  const rows: [string, LookResult, number, string][] = [
    ['unchanged, earliest jitter', { kind: 'read', digest: 'd1' }, 0, `look at +8 min`],
    ['unchanged, middle', { kind: 'read', digest: 'd1' }, 0.5, `look at +10 min`],
    ['unchanged, latest jitter', { kind: 'read', digest: 'd1' }, 1, `look at +12 min`],
    ['changed', { kind: 'read', digest: 'd2' }, 0.5, 'worker: cluster-info changed'],
    ['unreadable', { kind: 'failed', why: 'HTTP 403' }, 0.5, 'worker: cannot read cluster-info (HTTP 403)'],
    [
      'the Node appeared',
      { kind: 'read', digest: 'd1', nodeAppeared: true },
      0.5,
      'worker: the Node appeared (its CA rotation annotation is owed)',
    ],
  ];
  for (const [what, result, random, want] of rows) {
    const next = afterLook(look, result, input(random));
    const got = next.kind === 'look' ? `look at +${(Date.parse(next.look.at) - NOW.getTime()) / MIN} min` : `worker: ${next.why}`;
    t.equal(got, want, what);
    if (next.kind === 'look') t.same({ ...next.look, at: look.at }, look, `${what}: only the time moves`);
  }
});

t.test(
  'the GET: mTLS verified against the kubeconfig’s CA, the digest of what the keeper reads, and every failure as failed',
  async (t) => {
    const ca = await createCa('cluster-ca');
    const other = await createCa('other-ca');
    const serving = await issueLeaf(ca, { commonName: 'kube-apiserver', usage: 'server', ipAddresses: ['127.0.0.1'] });
    const client = await issueLeaf(ca, { commonName: 'system:node:n1', organizations: ['system:nodes'], usage: 'client' });
    const dir = t.testdir();
    const current = join(dir, 'kubelet-client-current.pem');
    // As cert-store.ts writes it: certificate, then key, in one file.
    await writeFile(current, `${client.certPem.trim()}\n${client.keyPem.trim()}\n`);
    const cm = {
      kind: 'ConfigMap',
      metadata: { name: 'cluster-info' },
      data: { kubeconfig: 'kubeconfig text', 'jws-kubeconfig-abcdef': 'a token signature' },
    };
    const seen: { path: string; cn: string | undefined }[] = [];
    let status = 200;
    let nodeStatus = 404;
    const server: Server = createServer(
      { key: serving.keyPem, cert: serving.certPem, ca: ca.certPem, requestCert: true, rejectUnauthorized: true },
      (req, res) => {
        const peer = (req.socket as import('node:tls').TLSSocket).getPeerCertificate();
        seen.push({ path: req.url ?? '', cn: String(peer.subject?.CN) });
        if (req.url === '/api/v1/nodes/n1') return res.writeHead(nodeStatus).end('{}');
        res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(cm));
      },
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const { port } = server.address() as AddressInfo;
    const mine: CaLook = {
      ...look,
      url: `https://127.0.0.1:${port}/api/v1/namespaces/kube-public/configmaps/cluster-info?resourceVersion=0`,
      caPem: ca.certPem,
      certFile: current,
      keyFile: current,
    };
    const signal = new AbortController().signal;

    t.same(await lookAtClusterInfo(mine, signal), { kind: 'read', digest: clusterInfoDigest(cm) }, 'read and digested');
    t.same(
      seen,
      [{ path: '/api/v1/namespaces/kube-public/configmaps/cluster-info?resourceVersion=0', cn: 'system:node:n1' }],
      'as the node',
    );
    cm.data['jws-kubeconfig-abcdef'] = 'another token';
    t.same(await lookAtClusterInfo(mine, signal), { kind: 'read', digest: clusterInfoDigest(cm) }, 'read again');
    t.equal(
      clusterInfoDigest(cm),
      clusterInfoDigest({ ...cm, data: { kubeconfig: 'kubeconfig text' } }),
      'a bootstrap token’s signature is no change',
    );
    t.not(clusterInfoDigest({ data: { kubeconfig: 'other' } }), clusterInfoDigest(cm), 'the kubeconfig is');
    t.not(clusterInfoDigest({ ...cm, data: { ...cm.data, 'kubeboot-trust': 's' } }), clusterInfoDigest(cm), 'so is the statement');
    t.not(
      clusterInfoDigest({ ...cm, metadata: { annotations: { 'kubeboot.io/signer-ca-hash': 'sha256:00' } } }),
      clusterInfoDigest(cm),
      'and the signer annotation',
    );

    t.match(await lookAtClusterInfo({ ...mine, caPem: other.certPem }, signal), { kind: 'failed' }, 'a server the CA does not verify');
    t.match(
      await lookAtClusterInfo({ ...mine, certFile: join(dir, 'missing.pem') }, signal),
      { kind: 'failed', why: /does not exist/ },
      'no client certificate on disk',
    );
    status = 403;
    t.same(await lookAtClusterInfo(mine, signal), { kind: 'failed', why: 'HTTP 403' }, 'an error status');
    status = 200;
    const withNode = { ...mine, node: `https://127.0.0.1:${port}/api/v1/nodes/n1` };
    t.same(
      await lookAtClusterInfo(withNode, signal),
      { kind: 'read', digest: clusterInfoDigest(cm) },
      'a Node still absent (404) is no change',
    );
    nodeStatus = 200;
    t.same(
      await lookAtClusterInfo(withNode, signal),
      { kind: 'read', digest: clusterInfoDigest(cm), nodeAppeared: true },
      'the Node appeared',
    );
    nodeStatus = 403;
    t.same(await lookAtClusterInfo(withNode, signal), { kind: 'failed', why: 'HTTP 403' }, 'any other answer for the Node: a worker');
    const aborted = new AbortController();
    aborted.abort();
    t.match(await lookAtClusterInfo(mine, aborted.signal), { kind: 'failed' }, 'an aborted look (timeout, nudge, SIGTERM)');
  },
);
