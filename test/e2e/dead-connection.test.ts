// A connection that goes silent without closing (a partition, a hung proxy or
// load balancer) is noticed within 30 s, on the node's CSR wait and on the
// approver's CSR watch alike, measured from the moment the loopback proxy in
// front of the real API server stopped moving bytes. client-go notices
// through HTTP/2 PINGs (read-idle 30 s, ping timeout 15 s); kubeboot through
// undici's (agent/kube/client.ts PING_INTERVAL_MS). Before that, the node
// needed ~88 s and the approver's watch up to 2 min.
import { Writable } from 'node:stream';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import t from 'tap';
import { stringify } from 'yaml';
import { KubeClient } from '../../agent/kube/client.js';
import { createCsr, waitForCertificate } from '../../agent/kube/csr-requests.js';
import { createLogger } from '../../agent/log.js';
import { craftCsrPem, installApprover, startApprover } from '../support/approver.js';
import { controlPlaneOrSkip, type ControlPlane } from '../support/controlplane.js';
import { startFaultProxy } from '../support/fault-proxy.js';
import { writeKubeconfig } from '../support/kubeconfig.js';

/** What the issue asks for; client-go's worst case is 45 s. */
const DETECT_WITHIN_MS = 30_000;
/** How long the test waits for a detection before calling it missed (the old behaviour needed ~88 s). */
const GIVE_UP_MS = DETECT_WITHIN_MS + 15_000;

/** Open CSR watches on the API server, from its own long-running request gauge. */
async function csrWatches(plane: ControlPlane): Promise<number> {
  const res = await plane.admin.request<string>('GET', '/metrics');
  let open = 0;
  for (const line of String(res.body).split('\n')) {
    if (
      line.startsWith('apiserver_longrunning_requests{') &&
      line.includes('resource="certificatesigningrequests"') &&
      line.includes('verb="WATCH"')
    ) {
      open += Number(line.slice(line.lastIndexOf(' ') + 1));
    }
  }
  return open;
}

/** Log lines with the moment each was written, and a wait for one that matches. */
function capturedLogger() {
  const lines: { at: number; text: string }[] = [];
  const waiters: { re: RegExp; resolve: (at: number) => void }[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      const line = { at: performance.now(), text: chunk.toString() };
      lines.push(line);
      for (const w of [...waiters]) if (w.re.test(line.text)) waiters.splice(waiters.indexOf(w), 1), w.resolve(line.at);
      done();
    },
  });
  return {
    logger: createLogger({ format: 'json', stream, level: 'debug' }),
    lines,
    /** Resolves with the time of the first line matching `re` written from now on, or null after `ms`. */
    next(re: RegExp, ms: number): Promise<number | null> {
      return new Promise((resolve) => {
        const timer = setTimeout(() => resolve(null), ms);
        waiters.push({ re, resolve: (at) => (clearTimeout(timer), resolve(at)) });
      });
    },
  };
}

const plane = await controlPlaneOrSkip(t, { name: 'dead-connection' });
if (plane) {
  t.test("the node's CSR wait notices a silent connection within 30 s, and gets its certificate once the network heals", async (t) => {
    const proxy = await startFaultProxy(plane.server);
    t.teardown(() => proxy.close());
    const token = await plane.admin.createBootstrapToken();
    const client = new KubeClient({ server: proxy.url, caPem: plane.caPem }, { kind: 'token', token: token.token });
    t.teardown(() => client.close());
    const name = `dead-connection-${Date.now()}`;
    const csr = await createCsr(
      client,
      {
        name,
        requestPem: await craftCsrPem({ cn: 'dead-connection-test' }),
        signerName: 'kubernetes.io/kube-apiserver-client',
        usages: ['digital signature', 'client auth'],
        expirationSeconds: null,
      },
      async () => null,
    );
    const log = capturedLogger();
    const watchesBefore = await csrWatches(plane);
    const waiting = waitForCertificate(client, csr, { logger: log.logger, timeoutMs: 180_000, pendingNoticeMs: 600_000 });
    await plane.admin.waitFor(
      'the node to watch its CSR',
      async () => ((await csrWatches(plane)) > watchesBefore ? true : undefined),
      30_000,
    );

    const silentAt = proxy.silence();
    const noticedAt = await log.next(new RegExp(`waiting for CSR ${name}: .*retrying`), GIVE_UP_MS);
    const ms = noticedAt === null ? null : noticedAt - silentAt;
    t.comment(`node CSR wait: dead connection noticed after ${ms === null ? `more than ${GIVE_UP_MS}` : Math.round(ms)} ms`);
    t.ok(
      ms !== null && ms <= DETECT_WITHIN_MS,
      `noticed within ${DETECT_WITHIN_MS} ms (${ms === null ? 'not at all' : `${Math.round(ms)} ms`})`,
    );

    proxy.heal();
    await plane.admin.approveCsr(name);
    const certPem = await waiting;
    t.match(certPem, /-----BEGIN CERTIFICATE-----/, 'the wait finishes with the certificate over a new connection');
  });

  t.test("the approver's CSR watch notices a silent connection within 30 s", async (t) => {
    const dir = t.testdir();
    // The shipped RBAC; a kubeconfig of its own that goes through the proxy.
    await installApprover(plane, dir);
    const proxy = await startFaultProxy(plane.server);
    t.teardown(() => proxy.close());
    const kubeconfig = join(dir, 'approver-via-proxy.conf');
    await writeKubeconfig(kubeconfig, proxy.url, { pem: plane.caPem }, await plane.mintClientCert({ commonName: 'kubeboot:approver' }));
    const config = join(dir, 'approver-via-proxy.yaml');
    await writeFile(config, stringify({ approver: { kubeconfig } }));
    const watchesBefore = await csrWatches(plane);
    // Slow leader election, so that only the watch's own mechanism can notice in time
    // (a lease request timing out would also take the connection down).
    const approver = startApprover(config, ['--lease-duration', '60s', '--renew-deadline', '45s', '--retry-period', '40s']);
    t.teardown(async () => {
      approver.child.kill('SIGTERM');
      await approver.done;
    });
    await approver.waitForOutput(/became the leader/, 60_000);
    await plane.admin.waitFor(
      'the approver to watch CSRs',
      async () => ((await csrWatches(plane)) > watchesBefore ? true : undefined),
      30_000,
    );

    const silentAt = proxy.silence();
    const noticed = await approver.waitForOutput(/CSR list\/watch failed; re-listing/, GIVE_UP_MS).then(
      () => performance.now(),
      () => null,
    );
    const ms = noticed === null ? null : noticed - silentAt;
    t.comment(`approver CSR watch: dead connection noticed after ${ms === null ? `more than ${GIVE_UP_MS}` : Math.round(ms)} ms`);
    t.ok(
      ms !== null && ms <= DETECT_WITHIN_MS,
      `noticed within ${DETECT_WITHIN_MS} ms (${ms === null ? 'not at all' : `${Math.round(ms)} ms`})`,
    );
  });
}
