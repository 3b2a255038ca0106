// The daemon's own look at kube-public/cluster-info (commit 54c71cf), driven
// by a real worker against a real control plane: the worker's CA step hands
// over a look when nothing is pending, the daemon makes it itself, an
// unchanged cluster-info starts no worker, a changed one does.
//
// The node registers its Node object the way a kubelet does, with its own
// credential once that is issued: its kubelet hook runs `kubectl create` on
// kubelet.conf. Hooks run before the keeper's look after an issue, so that
// look can already write the Node's kubeboot.io/ca-rotation annotation — the
// last thing the keeper waits for before it offers a look — and the first
// worker ends with one. (A Node the test creates from outside, as
// registerNodeOnceCredentialed does, races that look; when it loses, the
// first worker ends without a look and the hand-over waits a whole interval
// for the second worker.)
//
// What it costs: about 5–6 minutes, nearly all idle, at worst about 7. A
// worker ends only when nothing is due for REST_AFTER_MS (2 min,
// daemon/daemon.ts; daemon/schedule.ts mayRest), and the CA step is due again
// after caRotation.interval × 0.8–1.2, so the interval is 160 s (≥ 128 s); the
// daemon's looks follow at that interval too: one look unchanged, then
// cluster-info changes and the next look starts a worker. Certificates are the
// plane's default hour, so no renewal is due meanwhile.
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { request } from 'undici';
import { NODE_ANNOTATION, STATEMENT_KEY } from '../../agent/kube/trust-requests.js';
import type { KubeObject } from '../support/admin.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { assertNoSecrets, handToken, nodeLayout, startKubeboot, startListening, type Running } from '../support/kubeboot.js';

const INTERVAL_S = 160;
/** The longest a look can be after the one before it (interval × 1.2), and slack for a loaded machine. */
const LOOK_BOUND_MS = INTERVAL_S * 1200 + 60_000;
const CLUSTER_INFO = '/api/v1/namespaces/kube-public/configmaps/cluster-info';
const NAME = 'look-1';

const plane = await controlPlaneOrSkip(t, { name: 'daemon-ca-look' });
if (plane) {
  const kubectl = plane.kubectlPath;
  t.ok(kubectl, 'kubectl is there: the node registers itself with it');

  t.test('the resting daemon looks at cluster-info itself: unchanged starts no worker, changed starts one', async (t) => {
    const dir = t.testdir();
    const nodeFile = join(dir, 'node.json');
    await writeFile(nodeFile, JSON.stringify({ apiVersion: 'v1', kind: 'Node', metadata: { name: NAME } }));
    const node = await nodeLayout(dir, NAME, {
      caRotation: { enabled: true, interval: `${INTERVAL_S}s` },
      kubeProxy: { enabled: false },
      // The kubelet registers its Node once it holds its credential; `create` fails harmlessly on a later run.
      kubelet: {
        hooks: [[kubectl!, '--kubeconfig', join(dir, 'kubelet.conf'), '--cache-dir', join(dir, 'kube-cache'), 'create', '-f', nodeFile]],
      },
    });
    await handToken(plane, node, 'data');
    const { daemon, port } = await launchDaemon(['run', '--config', node.config, '--log-level', 'debug']);
    t.teardown(async () => {
      if (daemon.child.exitCode === null && daemon.child.signalCode === null) daemon.child.kill('SIGTERM');
      await daemon.done;
    });
    const get = async (path: string) => {
      const res = await request(`http://127.0.0.1:${port}${path}`);
      return { status: res.statusCode, body: await res.body.text() };
    };
    const metrics = async () => (await get('/metrics')).body;
    const explain = async <T>(waiting: Promise<T>): Promise<T> => {
      try {
        return await waiting;
      } catch (err) {
        process.stderr.write(`\n--- kubeboot output ---\n${daemon.output()}\n--- /metrics ---\n${await metrics().catch(() => '')}\n---\n`);
        throw err;
      }
    };
    const waitMetric = (what: string, probe: (body: string) => boolean, timeoutMs: number) =>
      explain(plane.admin.waitFor(what, async () => ((await metrics().then(probe)) ? true : undefined), timeoutMs));

    await explain(plane.admin.waitFor('/readyz 200', async () => ((await get('/readyz')).status === 200 ? true : undefined), 120_000));
    const registered = (await plane.admin.request<KubeObject>('GET', `/api/v1/nodes/${NAME}`)).body;
    t.equal(registered.metadata.name, NAME, 'the Node is registered (by the kubelet hook, with the node’s own credential)');

    // The first worker ends, handing the CA check's next look to the daemon.
    const handover = await explain(daemon.waitForOutput(/the daemon looks at cluster-info itself at [^"\s;]+/, 60_000));
    const rested = await metrics();
    const passesAtRest = counter(rested, 'kubeboot_workers_total');
    t.ok(passesAtRest >= 1, `a worker ran to rest (kubeboot_workers_total ${passesAtRest})`);
    t.equal(counter(rested, 'kubeboot_ca_looks_total', 'unchanged'), 0, 'no look made yet when the worker ends');
    const annotated = (await plane.admin.request<KubeObject>('GET', `/api/v1/nodes/${NAME}`)).body;
    const annotation = (annotated.metadata.annotations as Record<string, string> | undefined)?.[NODE_ANNOTATION];
    t.ok(annotation, `the Node carries ${NODE_ANNOTATION} (what the keeper waits for before it offers a look)`);
    const lookAt = Date.parse(handover.replace(/^.* at /, ''));
    const restAt = Date.now();
    t.ok(lookAt - restAt >= 0.8 * INTERVAL_S * 1000 - 30_000, `the look is due about an interval on (${new Date(lookAt).toISOString()})`);

    // 1. The daemon's look: cluster-info as the keeper last read it; no worker.
    await waitMetric('an unchanged look', (b) => counter(b, 'kubeboot_ca_looks_total', 'unchanged') >= 1, LOOK_BOUND_MS);
    const looked = await metrics();
    t.ok(Date.now() >= lookAt - 1000, 'the look came when the CA step said, not before');
    t.equal(counter(looked, 'kubeboot_workers_total'), passesAtRest, 'the unchanged look started no worker');
    t.equal(counter(looked, 'kubeboot_ca_looks_total', 'changed'), 0, 'no look found a change');
    t.equal(counter(looked, 'kubeboot_ca_looks_total', 'failed'), 0, 'no look failed');
    t.match(daemon.output(), /cluster-info unchanged; next look at/, 'the daemon schedules its next look itself');
    t.notMatch(daemon.output(), /starting a worker for the CA check/, 'and starts no worker for it');
    t.equal((await get('/readyz')).status, 200, '/readyz 200 while the daemon rests');

    // 2. cluster-info changes in a field the digest covers: an unsigned trust statement, which the keeper ignores.
    const kubeletConfBefore = await readFile(node.kubeletKubeconfig, 'utf8');
    const cm = (await plane.admin.request<KubeObject>('GET', CLUSTER_INFO)).body;
    cm.data = { ...cm.data, [STATEMENT_KEY]: JSON.stringify({ note: 'unsigned, ignored by every node' }) };
    const put = await plane.admin.request('PUT', CLUSTER_INFO, cm);
    t.equal(put.status, 200, 'cluster-info republished with an unsigned kubeboot-trust statement');

    await waitMetric('a look that finds cluster-info changed', (b) => counter(b, 'kubeboot_ca_looks_total', 'changed') >= 1, LOOK_BOUND_MS);
    t.equal(counter(await metrics(), 'kubeboot_ca_looks_total', 'unchanged'), 1, 'no second unchanged look came before it');
    t.match(daemon.output(), /cluster-info changed; starting a worker for the CA check/, 'the daemon starts a worker for the change');
    await waitMetric('the worker the change started, at rest', (b) => counter(b, 'kubeboot_workers_total') > passesAtRest, 120_000);
    const after = await metrics();
    t.equal(counter(after, 'kubeboot_workers_total'), passesAtRest + 1, 'exactly one worker followed the changed look');
    t.equal(counter(after, 'kubeboot_ca_looks_total', 'failed'), 0, 'no look failed');
    t.equal(counter(after, 'kubeboot_ca_bundle_refusals_total'), 0, 'the unsigned statement refused no bundle');
    t.equal(counter(after, 'kubeboot_renewals_total', 'kubelet'), 1, 'no renewal beyond the first issue');
    t.equal(counter(after, 'kubeboot_hook_failures_total'), 0, 'the registering hook ran once, and succeeded');
    t.equal((await get('/readyz')).status, 200, '/readyz still 200');
    t.equal(await readFile(node.kubeletKubeconfig, 'utf8'), kubeletConfBefore, 'kubelet.conf untouched by the change');
    // That worker's CA step read the new cluster-info and handed the daemon a look again.
    await explain(
      plane.admin.waitFor(
        'a second hand-over',
        async () => ((daemon.output().match(/the daemon looks at cluster-info itself at/g) ?? []).length >= 2 ? true : undefined),
        30_000,
      ),
    );
    t.pass('the worker after the change ended with a look for the daemon again');

    daemon.child.kill('SIGTERM');
    const result = await daemon.done;
    assertNoSecrets(t, result.stdout + result.stderr, 'kubeboot run');
    t.equal(result.code, 0, 'exits 0 on SIGTERM');
  });
}

/** A counter's value in the exposition text, summed over its samples (absent is 0); with `value`, only samples whose one label has it. */
function counter(body: string, name: string, value?: string): number {
  const labels = value === undefined ? '(\\{[^}]*\\})?' : `\\{[a-z_]+="${value}"\\}`;
  return [...body.matchAll(new RegExp(`^${name}${labels} (\\S+)$`, 'gm'))].reduce((sum, m) => sum + Number(m.at(-1)), 0);
}

/** `kubeboot run` listening on a free port (startListening). */
function launchDaemon(args: string[]): Promise<{ daemon: Running; port: number }> {
  return startListening((listen) => startKubeboot([...args, ...listen]));
}
