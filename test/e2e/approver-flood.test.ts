// `kubeboot approver` under a flood of big CSRs, against a real control plane:
// a bootstrap token (anyone who may create CSRs) files 250 CSRs of about 1 MB
// for a signer the approver does not handle. Before, the approver kept each
// whole (607 MiB peak here on the watch, 508 MiB from the list; 697 MiB in
// the issue, against its Deployment's 256Mi limit: OOM-killed on every
// restart). Now it keeps about a kilobyte of each, stays under 256 MiB
// whichever way the flood comes, and still approves a kube-proxy CSR; a
// flood of what it must keep for its own signers takes it to its cache bound,
// where it goes not-ready instead of growing, and recovers once they are gone.
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { request } from 'undici';
import {
  approvals,
  craftCsrPem,
  createNode,
  csrEvents,
  installApprover,
  KUBE_PROXY,
  nodeClient,
  startApprover,
  submitCsr,
} from '../support/approver.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { kubeClient } from '../support/http.js';
import type { Running } from '../support/kubeboot.js';
import { freePort } from '../support/processes.js';

/** The Deployment's limit (packaging/manifests/approver/deployment/deployment.yaml). */
const LIMIT_MIB = 256;
const FLOOD = 250;
/** Bytes of spec.request each; the API server stores it (Go's PEM decoder ignores what follows the block; etcd takes 1.5 MiB). */
const REQUEST_BYTES = 1_000_000;

const plane = await controlPlaneOrSkip(t, { name: 'approver-flood', csrSigning: false });
if (plane) {
  const dir = await mkdtemp(join(tmpdir(), 'kubeboot-approver-flood-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const config = await installApprover(plane, dir);
  const token = await plane.admin.createBootstrapToken();
  const bootstrapper = kubeClient({ server: plane.server, caPem: plane.caPem, token: token.token });
  t.teardown(() => bootstrapper.close());
  const block = await craftCsrPem({ cn: 'flood' });
  /** A CSR's PEM padded to `bytes`. */
  const padded = (pem: string, bytes: number) => `${pem}\n${'#'.repeat(bytes - pem.length - 2)}\n`;

  /** Files `count` CSRs as the bootstrap token, eight at a time; returns their names. */
  const flood = async (count: number, spec: Parameters<typeof submitCsr>[1]) => {
    const names: string[] = [];
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (names.length < count) {
          const i = names.push('') - 1;
          names[i] = await submitCsr(bootstrapper, spec);
        }
      }),
    );
    return names;
  };

  const peakMiB = (running: Running) =>
    Number(/^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${running.child.pid}/status`, 'utf8'))?.[1]) / 1024;
  const get = async (port: number, path: string) => {
    const res = await request(`http://127.0.0.1:${port}${path}`);
    return { status: res.statusCode, body: await res.body.text() };
  };
  const gauge = async (port: number, name: string) =>
    Number(new RegExp(`^${name} (\\S+)$`, 'm').exec((await get(port, '/metrics')).body)?.[1]);

  const start = async () => {
    const port = await freePort();
    const running = startApprover(config, ['--resync-period', '10m', '--approver-listen', `127.0.0.1:${port}`]);
    t.teardown(async () => {
      running.child.kill('SIGTERM');
      await running.done;
    });
    await running.waitForOutput(/became the leader/, 120_000);
    return { running, port };
  };

  /** A kube-proxy CSR from a node with a Node object, approved. */
  const approvesKubeProxy = async (node: string) => {
    await createNode(plane, node);
    const client = await nodeClient(plane, node);
    const name = await submitCsr(client, { cn: KUBE_PROXY.cn, name: node });
    await client.close();
    await plane.admin.waitFor(
      `kube-proxy CSR ${name} approved`,
      async () => (approvals(await plane.admin.getCsr(name)).length > 0 ? true : undefined),
      120_000,
    );
  };

  t.test('a flood arriving on the watch: it keeps a kilobyte of each, stays under 256 MiB and still approves', async (t) => {
    const { running, port } = await start();
    const before = peakMiB(running);
    await flood(FLOOD, { cn: 'flood', name: 'watched', signer: 'example.com/foreign', pem: padded(block, REQUEST_BYTES) });
    await approvesKubeProxy('after-watched-flood');
    const peak = peakMiB(running);
    t.comment(
      `watch: peak RSS ${peak.toFixed(1)} MiB (${before.toFixed(1)} MiB before the flood), ${FLOOD} CSRs of ${REQUEST_BYTES} bytes`,
    );
    t.ok(peak < LIMIT_MIB, `peak RSS ${peak.toFixed(1)} MiB is under ${LIMIT_MIB} MiB`);
    const kept = await gauge(port, 'kubeboot_approver_csr_cache_bytes');
    t.comment(`the cache counts ${kept} bytes for ${FLOOD + 1} CSRs`);
    t.ok(kept < (FLOOD + 1) * 2048, `${kept} bytes counted for ${FLOOD} MB of requests`);
    const ready = await get(port, '/readyz');
    t.equal(ready.status, 200, `/readyz is 200\n${ready.body}`);
    running.child.kill('SIGTERM');
    await running.done;
  });

  // Started in the next test and kept for the ones after it.
  let listed: { running: Running; port: number };

  t.test('a flood already in the list it starts from: stays under 256 MiB and still approves', async (t) => {
    listed = await start();
    await approvesKubeProxy('after-listed-flood');
    const peak = peakMiB(listed.running);
    t.comment(`list: peak RSS ${peak.toFixed(1)} MiB, starting with ${FLOOD} CSRs of ${REQUEST_BYTES} bytes stored`);
    t.ok(peak < LIMIT_MIB, `peak RSS ${peak.toFixed(1)} MiB is under ${LIMIT_MIB} MiB`);
    t.equal((await get(listed.port, '/readyz')).status, 200, '/readyz is 200');
  });

  t.test('a kube-proxy CSR whose request is larger than any rule passes is refused under request-signature, unread', async (t) => {
    await createNode(plane, 'oversized');
    const node = await nodeClient(plane, 'oversized');
    const pem = padded(await craftCsrPem({ cn: KUBE_PROXY.cn }), 100_000);
    const name = await submitCsr(node, { cn: KUBE_PROXY.cn, name: 'oversized', pem });
    await node.close();
    const [event] = await plane.admin.waitFor(
      `an Event on ${name}`,
      async () => {
        const found = await csrEvents(plane, name);
        return found.length > 0 ? found : undefined;
      },
      60_000,
    );
    t.match(
      event?.message,
      /rule request-signature: spec\.request is 100000 bytes, more than the 65536/,
      'the Event names the rule and the size',
    );
    t.same((await plane.admin.getCsr(name))?.status?.conditions ?? [], [], 'left pending');
  });

  t.test('past its cache bound it goes not-ready instead of growing, and is ready again once the CSRs are gone', async (t) => {
    const { running, port } = listed;
    // CSRs for its own signer, each under the request bound, so kept whole: about 80 KB of
    // JSON each, 1,000 of them well past the 64 MiB bound.
    const names = await flood(1000, { cn: 'cap-flood', name: 'kept', pem: padded(block, 60_000) });
    const notReady = await plane.admin.waitFor(
      '/readyz to say the cache is full',
      async () => {
        const res = await get(port, '/readyz');
        return res.status === 503 && /CSR cache full/.test(res.body) ? res.body : undefined;
      },
      120_000,
    );
    t.match(
      notReady,
      /not synced: CSR cache full: the \d+ CSRs kept took over 64\.0 MiB; emptied, re-listing until they fit/,
      '/readyz says why',
    );
    t.equal(await gauge(port, 'kubeboot_approver_csr_cache_full'), 1, 'kubeboot_approver_csr_cache_full is 1');
    t.match(running.output(), /CSR cache full: .*not ready, not leading/, 'a log line says so');
    await plane.admin.waitFor(
      'it to stand aside',
      async () => (/stopped leading.*CSR cache not in sync/.test(running.output()) ? true : undefined),
      30_000,
    );
    const peak = peakMiB(running);
    t.comment(`full: peak RSS ${peak.toFixed(1)} MiB with ${names.length} CSRs of 60,000 bytes kept up to the bound`);
    t.ok(peak < LIMIT_MIB, `peak RSS ${peak.toFixed(1)} MiB is under ${LIMIT_MIB} MiB`);
    for (let i = 0; i < names.length; i += 50) await Promise.all(names.slice(i, i + 50).map((n) => plane.admin.deleteCsr(n)));
    await plane.admin.waitFor('/readyz 200 again', async () => ((await get(port, '/readyz')).status === 200 ? true : undefined), 120_000);
    t.equal(await gauge(port, 'kubeboot_approver_csr_cache_full'), 0, 'no longer full');
    t.match(running.output(), /CSR cache fits again; ready/, 'a log line says so');
    await approvesKubeProxy('after-full');
    t.pass('it leads and approves again');
  });
}
