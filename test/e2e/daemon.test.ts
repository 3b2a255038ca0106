// `kubeboot run` against a real control plane: readiness, renewal with the
// node's own certificate, reaction to files changed behind its back, signals,
// and recovery of an expired node.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { lstat, mkdir, readFile, readlink, rm, stat, symlink, rename, writeFile } from 'node:fs/promises';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { parse, stringify } from 'yaml';
import { renderClientKubeconfig } from '../../agent/kubeconfig/render.js';
import { parseCertificateChain } from '../../agent/pki/certificate.js';
import type { KubeObject } from '../support/admin.js';
import { controlPlaneOrSkip, type ControlPlane } from '../support/controlplane.js';
import {
  assertNoSecrets,
  handToken,
  kubeboot,
  nodeLayout,
  startKubeboot,
  startListening,
  type NodeLayout,
  type Running,
} from '../support/kubeboot.js';
import { listenNotifySocket, type NotifySocket } from '../support/notify-socket.js';

const run = promisify(execFile);

const plane = await controlPlaneOrSkip(t, { name: 'daemon' });
if (plane) {
  const kubectl = plane.kubectlPath!;
  const whoami = async (kubeconfig: string) =>
    JSON.parse((await run(kubectl, ['--kubeconfig', kubeconfig, 'auth', 'whoami', '-o', 'json'])).stdout).status.userInfo
      .username as string;
  const csrsBy = async (username: string) => (await plane.admin.listCsrs()).filter((c: KubeObject) => c.spec?.username === username);
  const currentTarget = (node: NodeLayout) => readlink(join(node.kubeletCertDir, 'kubelet-client-current.pem'));

  /** Starts `kubeboot run`; `stop()` ends it and checks everything it printed for secrets. */
  async function startDaemon(
    t: Test,
    node: NodeLayout,
    extra: string[] = [],
  ): Promise<{ daemon: Running; notify: NotifySocket; port: number; stop: () => Promise<void> }> {
    const { notify, port, daemon } = await launchDaemon(node, extra);
    const end = async () => {
      if (daemon.child.exitCode === null && daemon.child.signalCode === null) daemon.child.kill('SIGTERM');
      const result = await daemon.done;
      await notify.close();
      return result;
    };
    t.teardown(end);
    const stop = async () => {
      const result = await end();
      assertNoSecrets(t, result.stdout + result.stderr, 'kubeboot run');
    };
    return { daemon, notify, port, stop };
  }

  /** `kubeboot run` listening on a free port (startListening), with a notify socket of its own. */
  async function launchDaemon(node: NodeLayout, extra: string[]): Promise<{ daemon: Running; notify: NotifySocket; port: number }> {
    let notify!: NotifySocket;
    const { daemon, port } = await startListening(
      async (listen) => {
        // Abstract socket: test dirs are longer than a unix socket path may be.
        notify = await listenNotifySocket(node.dir, { abstract: true });
        return startKubeboot(['run', '--config', node.config, ...listen, ...extra], { NOTIFY_SOCKET: notify.path });
      },
      () => notify.close(),
    );
    return { daemon, notify, port };
  }

  const get = async (port: number, path: string) => {
    const res = await request(`http://127.0.0.1:${port}${path}`);
    return { status: res.statusCode, body: await res.body.text() };
  };

  async function bootstrappedNode(t: Test, name: string, settings: Record<string, unknown> = {}): Promise<NodeLayout> {
    const node = await nodeLayout(t.testdir(), name, settings);
    await handToken(plane!, node, 'data');
    return node;
  }

  t.test('READY=1 arrives only with credentials on disk; the kubelet renews with its own certificate and runs its hook', async (t) => {
    const hookFile = join(t.testdir(), 'hook-ran');
    const node = await bootstrappedNode(t, 'daemon-1', {
      expirationSeconds: 600,
      // notAfter − 590 s, held to 5 % of the remaining lifetime: due about 30 s after each issue.
      renewal: { margin: '590s' },
      // One line per run: the hook runs after the first issue and after every renewal.
      kubelet: { hooks: [['/bin/sh', '-c', 'echo ran >> "$0"', hookFile]] },
    });
    const { daemon, notify, port, stop } = await startDaemon(t, node);

    await notify.waitFor((m) => m.includes('READY=1'), 120_000);
    const readyAt = Date.now();
    t.ok((await stat(node.kubeletKubeconfig)).isFile(), 'kubelet.conf exists when READY=1 arrives');
    const first = await currentTarget(node);
    const firstCert = parseCertificateChain(await readFile(first, 'utf8'))[0]!;

    const readyz = await get(port, '/readyz');
    t.equal(readyz.status, 200, '/readyz is 200 once the kubelet holds a valid certificate');
    const metrics = await get(port, '/metrics');
    const ttl = Number(metrics.body.match(/kubeboot_certificate_ttl_seconds\{identity="kubelet"\} (\S+)/)?.[1]);
    t.ok(ttl > 0 && ttl <= 600, `/metrics reports the kubelet TTL from the file (${ttl}s)`);

    // Wait for the signed CSR, not just its creation: the approver and signer
    // act some milliseconds after the CSR appears, and CI once read it in between.
    const renewal = await plane.admin.waitFor(
      'a renewal CSR requested by the node itself, signed',
      async () => (await csrsBy('system:node:daemon-1')).find((c: KubeObject) => c.status?.certificate),
      120_000,
    );
    t.equal(renewal.spec.signerName, 'kubernetes.io/kube-apiserver-client-kubelet');
    const approval = (renewal.status?.conditions ?? []).find((c: { type: string }) => c.type === 'Approved');
    t.equal(approval?.reason, 'KubebootApprover', 'approved by kubeboot approver (kubebootselfnodeclient)');
    const second = await plane.admin.waitFor('the link to move to the renewed file', async () => {
      const target = await currentTarget(node);
      return target !== first ? target : undefined;
    });
    t.not(second, first, 'kubelet-client-current.pem points at the new file');
    t.ok((await stat(first)).isFile(), 'the previous credential file is still on disk');
    t.ok(firstCert.notAfter.getTime() > Date.now(), 'the previous certificate was still valid when it was replaced');
    const hookRuns = async () => (await readFile(hookFile, 'utf8').catch(() => '')).split('\n').filter(Boolean).length;
    await plane.admin.waitFor('the hook to run after the renewal', async () => ((await hookRuns()) >= 2 ? true : undefined));
    t.equal(await whoami(node.kubeletKubeconfig), 'system:node:daemon-1', 'the kubeconfig works after renewal');
    t.equal(daemon.child.exitCode, null, 'still running');

    // The first run's result (from before READY) is already there; wait for the renewal's.
    const status = await plane.admin.waitFor('status to show the hook run after the renewal', async () => {
      const shown = JSON.parse(
        (await run(process.execPath, ['dist/kubeboot.cjs', 'status', '--config', node.config, '--output', 'json'])).stdout,
      );
      const at = shown.identities[0].daemon.lastHooks[0]?.at;
      return at && Date.parse(at) > readyAt ? shown : undefined;
    });
    t.ok(status.identities[0].daemon.nextRenewal, 'status shows the next renewal time');
    t.equal(status.identities[0].daemon.lastHooks[0].ok, true, 'status shows the hook result');
    await stop();
  });

  t.test('SIGHUP renews now; a deleted certificate is re-issued; a replaced one is respected', async (t) => {
    const node = await bootstrappedNode(t, 'daemon-2');
    const { daemon, notify, stop } = await startDaemon(t, node, ['--log-level', 'debug']);
    await notify.waitFor((m) => m.includes('READY=1'), 120_000);
    const first = await currentTarget(node);

    daemon.child.kill('SIGHUP');
    await plane.admin.waitFor('a CSR after SIGHUP', async () => (await csrsBy('system:node:daemon-2'))[0]);
    const afterHup = await plane.admin.waitFor('the renewed link', async () =>
      (await currentTarget(node)) !== first ? currentTarget(node) : undefined,
    );

    // `kubeboot renew` asks the running daemon instead of renewing behind its back.
    const renew = await run(process.execPath, ['dist/kubeboot.cjs', 'renew', '--config', node.config, '--identity', 'kubelet']);
    t.match(renew.stderr, /asked the running daemon \(pid \d+\) to renew kubelet/);
    const second = await plane.admin.waitFor('the link renewed on request', async () =>
      (await currentTarget(node)) !== afterHup ? currentTarget(node) : undefined,
    );
    t.equal((await csrsBy('system:node:daemon-2')).length, 2, 'one CSR for SIGHUP, one for kubeboot renew');

    // An operator deletes the credential files: the daemon still holds the last good credential and re-issues.
    const csrsBeforeDelete = (await csrsBy('system:node:daemon-2')).length;
    await rm(second);
    await rm(join(node.kubeletCertDir, 'kubelet-client-current.pem'));
    await withOutput(
      daemon,
      plane.admin.waitFor('a re-issue CSR', async () =>
        (await csrsBy('system:node:daemon-2')).length > csrsBeforeDelete ? true : undefined,
      ),
    );
    const third = await plane.admin.waitFor('a re-issued credential on disk', async () =>
      currentTarget(node)
        .then(async (p) => ((await stat(p).catch(() => null)) ? p : undefined))
        .catch(() => undefined),
    );
    t.ok((await stat(third)).isFile(), 're-issued credential on disk');
    t.equal(await whoami(node.kubeletKubeconfig), 'system:node:daemon-2');

    // An operator installs another valid certificate: it is re-read and kept, not overwritten.
    const minted = await plane.mintClientCert({
      commonName: 'system:node:daemon-2',
      organizations: ['system:nodes'],
      notAfter: new Date(Date.now() + 2 * 3600_000),
    });
    const manual = join(node.kubeletCertDir, 'kubelet-client-manual.pem');
    await writeFile(manual, minted.certPem + minted.keyPem, { mode: 0o600 });
    const csrsBefore = (await csrsBy('system:node:daemon-2')).length;
    const tmpLink = join(node.kubeletCertDir, 'manual-link');
    await symlink(manual, tmpLink);
    await rename(tmpLink, join(node.kubeletCertDir, 'kubelet-client-current.pem'));
    const notAfter = parseCertificateChain(minted.certPem)[0]!.notAfter.toISOString();
    await daemon.waitForOutput(new RegExp(`kubelet: certificate valid until ${notAfter.replace(/[.]/g, '\\.')}`));
    t.equal(await currentTarget(node), manual, 'the operator’s certificate stays in place');
    t.equal((await csrsBy('system:node:daemon-2')).length, csrsBefore, 'no CSR was made for it');
    await stop();
  });

  t.test('READY=1 waits only for the kubelet: kube-proxy waits for its own approval with kubeboot wait', async (t) => {
    const node = await bootstrappedNode(t, 'daemon-6', { kubeProxy: { enabled: true } });
    const { notify, port, stop } = await startDaemon(t, node);
    const ready = await notify.waitFor((m) => m.includes('READY=1'), 120_000);
    t.equal(await whoami(node.kubeletKubeconfig), 'system:node:daemon-6', 'kubelet.conf works when READY=1 arrives');
    const proxyCsr = await plane.admin.waitFor('the pending kube-proxy CSR', async () =>
      (await csrsBy('system:node:daemon-6')).find(
        (c: KubeObject) => c.spec?.signerName === 'kubernetes.io/kube-apiserver-client' && !c.status?.conditions,
      ),
    );
    t.notOk(existsSync(node.kubeProxyKubeconfig), 'READY=1 came while kube-proxy had no credential');
    t.match(ready, /kube-proxy/, 'the READY status names what is still pending');
    t.ok(existsSync(node.bootstrapKubeconfig), 'the bootstrap kubeconfig stays until every identity is proven');
    const readyz = await get(port, '/readyz');
    t.equal(readyz.status, 503, '/readyz still reports the pending kube-proxy');
    t.match(readyz.body, /^kube-proxy: (?!valid)/m, '/readyz names the kube-proxy identity as not valid');

    const status = await kubeboot(t, ['status', '--config', node.config, '--output', 'json']);
    const proxyStatus = JSON.parse(status.stdout).identities.find((i: { identity: string }) => i.identity === 'kube-proxy');
    t.equal(proxyStatus.pendingCsr?.name, proxyCsr.metadata.name, 'kubeboot status names the pending CSR');

    const timedOut = await kubeboot(t, ['wait', '--config', node.config, '--identity', 'kube-proxy', '--timeout', '1s']);
    t.equal(timedOut.code, 4, 'kubeboot wait --timeout exits 4 while the CSR is pending');
    t.match(timedOut.stderr, new RegExp(`kubectl certificate approve ${proxyCsr.metadata.name}`), 'and says which CSR to approve');
    t.equal(
      (await kubeboot(t, ['wait', '--config', node.config, '--identity', 'kubelet', '--timeout', '1s'])).code,
      0,
      'the kubelet identity is already there',
    );

    const waiting = startKubeboot(['wait', '--config', node.config, '--identity', 'kube-proxy']);
    await waiting.waitForOutput(/waiting for kube-proxy/);
    t.equal(waiting.child.exitCode, null, 'kubeboot wait is still waiting before approval');
    await plane.admin.approveCsr(proxyCsr.metadata.name);
    const waited = await waiting.done;
    t.equal(waited.code, 0, 'kubeboot wait exits 0 once kube-proxy holds its credential');
    t.equal(await whoami(node.kubeProxyKubeconfig), 'system:kube-proxy', 'kube-proxy.conf works');
    await plane.admin.waitFor('the bootstrap kubeconfig to be deleted', async () =>
      existsSync(node.bootstrapKubeconfig) ? undefined : true,
    );
    await plane.admin.waitFor('/readyz to turn 200', async () => ((await get(port, '/readyz')).status === 200 ? true : undefined));
    await stop();
  });

  t.test('SIGTERM during a renewal leaves the old credential intact', async (t) => {
    const node = await bootstrappedNode(t, 'daemon-3', { kubeProxy: { enabled: true } });
    const { daemon, notify } = await startDaemon(t, node);
    const proxyCsr = await plane.admin.waitFor('the kube-proxy CSR', async () =>
      (await plane.admin.listCsrs()).find(
        (c: KubeObject) =>
          c.spec?.signerName === 'kubernetes.io/kube-apiserver-client' &&
          !c.status?.conditions &&
          c.spec?.username === 'system:node:daemon-3',
      ),
    );
    await plane.admin.approveCsr(proxyCsr.metadata.name);
    await notify.waitFor((m) => m.includes('READY=1'), 120_000);
    t.equal(
      (await kubeboot(t, ['wait', '--config', node.config, '--identity', 'kube-proxy', '--timeout', '2m'])).code,
      0,
      'kube-proxy holds its credential',
    );
    const proxyLink = join(node.kubeProxyCertDir, 'kube-proxy-client-current.pem');
    const before = await readlink(proxyLink);

    daemon.child.kill('SIGHUP');
    await plane.admin.waitFor('a pending kube-proxy renewal CSR', async () =>
      (await plane.admin.listCsrs()).find(
        (c: KubeObject) =>
          c.spec?.signerName === 'kubernetes.io/kube-apiserver-client' &&
          c.spec?.username === 'system:node:daemon-3' &&
          !c.status?.conditions,
      ),
    );
    daemon.child.kill('SIGTERM');
    const result = await daemon.done;
    assertNoSecrets(t, result.stdout + result.stderr, 'kubeboot run');
    t.equal(result.code, 0, 'exits 0 on SIGTERM');
    t.equal(await readlink(proxyLink), before, 'the kube-proxy link still points at the old credential');
    t.equal(await whoami(node.kubeProxyKubeconfig), 'system:kube-proxy', 'the old kube-proxy kubeconfig still works');
    t.equal((await lstat(node.kubeletKubeconfig)).isFile(), true);
  });

  t.test('SIGHUP reloads the configuration: a new node name is identity drift, re-issued with a new bootstrap kubeconfig', async (t) => {
    const node = await bootstrappedNode(t, 'daemon-5');
    const { daemon, notify, port, stop } = await startDaemon(t, node);
    await notify.waitFor((m) => m.includes('READY=1'), 120_000);
    const oldTarget = await currentTarget(node);

    // The node is renamed in the config file. Its certificate names the old
    // node, so it cannot ask for the new name itself: kubeboot keeps the old
    // credential, says what it needs, and waits for a bootstrap kubeconfig.
    const config = parse(await readFile(node.config, 'utf8'));
    await writeFile(node.config, stringify({ ...config, nodeName: 'daemon-5b' }));
    daemon.child.kill('SIGHUP');
    await daemon.waitForOutput(/configuration reloaded/);
    // The forced renewal's first attempt says why the kubelet cannot ask itself (the retry a minute on says it again).
    await daemon.waitForOutput(
      /no usable credential to request certificates with \(certificate is for CN=system:node:daemon-5,.*configured CN=system:node:daemon-5b/,
    );
    await daemon.waitForOutput(/place a new bootstrap kubeconfig at/);
    t.equal(await currentTarget(node), oldTarget, 'the old credential stays in place meanwhile');
    t.equal((await get(port, '/readyz')).status, 503, '/readyz is 503: the kubelet credential no longer fits the configuration');

    const staged = join(node.dir, 'staged.conf');
    await handToken(plane, node, 'data', staged);
    await rename(staged, node.bootstrapKubeconfig);
    await withOutput(
      daemon,
      plane.admin.waitFor(
        'a credential for the new name',
        async () => ((await currentTarget(node)) !== oldTarget ? true : undefined),
        120_000,
      ),
    );
    t.equal(await whoami(node.kubeletKubeconfig), 'system:node:daemon-5b', 'the kubelet now authenticates under the new name');
    await plane.admin.waitFor('/readyz to recover', async () => ((await get(port, '/readyz')).status === 200 ? true : undefined));
    const deleted = await plane.admin
      .waitFor('the bootstrap kubeconfig to be deleted', async () =>
        (await stat(node.bootstrapKubeconfig).catch(() => null)) ? undefined : true,
      )
      .catch(() => false);
    t.ok(deleted, 'the bootstrap kubeconfig is deleted after use');
    await stop();
  });

  t.test('an expired node re-bootstraps when a new bootstrap kubeconfig is dropped in place', async (t) => {
    const node = await nodeLayout(t.testdir(), 'daemon-4');
    await plantExpiredKubelet(plane, node);
    const { daemon, notify, port, stop } = await startDaemon(t, node);
    await daemon.waitForOutput(/place a new bootstrap kubeconfig at/);
    t.equal((await get(port, '/readyz')).status, 503, '/readyz is 503 while the certificate is expired');
    t.notOk(
      notify.messages().some((m) => m.includes('READY=1')),
      'no READY=1 while expired',
    );

    // Written beside it, then renamed into place, as a careful operator or cloud-init would.
    const staged = join(node.dir, 'staged.conf');
    await handToken(plane, node, 'data', staged);
    await rename(staged, node.bootstrapKubeconfig);

    await notify.waitFor((m) => m.includes('READY=1'), 120_000);
    t.equal(await whoami(node.kubeletKubeconfig), 'system:node:daemon-4');
    await t.rejects(stat(node.bootstrapKubeconfig), { code: 'ENOENT' }, 'the new bootstrap kubeconfig is deleted after use');
    t.equal((await get(port, '/readyz')).status, 200);
    await stop();
  });

  t.test(
    'a status port held by another process: the node bootstraps and is READY, the listener binds once the port is freed',
    async (t) => {
      const node = await bootstrappedNode(t, 'daemon-held-port');
      // A local user holds the port while kubeboot is down.
      const holder = createServer();
      await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
      const port = (holder.address() as AddressInfo).port;
      t.teardown(() => new Promise<void>((resolve) => (holder.listening ? holder.close(() => resolve()) : resolve())));
      const notify = await listenNotifySocket(node.dir, { abstract: true });
      const daemon = startKubeboot(['run', '--config', node.config, '--listen', `127.0.0.1:${port}`], { NOTIFY_SOCKET: notify.path });
      t.teardown(async () => {
        if (daemon.child.exitCode === null && daemon.child.signalCode === null) daemon.child.kill('SIGTERM');
        await daemon.done;
        await notify.close();
      });
      await daemon.waitForOutput(new RegExp(`cannot listen on 127\\.0\\.0\\.1:${port} .*working on without them`), 60_000);
      const ready = await notify.waitFor((m) => m.split('\n').includes('READY=1'), 120_000);
      t.match(ready, /\/healthz, \/readyz and \/metrics unavailable: .*EADDRINUSE/, 'READY=1 came without the listener, and says so');
      t.equal(await whoami(node.kubeletKubeconfig), 'system:node:daemon-held-port', 'the bootstrap happened');
      t.equal(daemon.child.exitCode, null, 'still running');
      await new Promise<void>((resolve) => holder.close(() => resolve()));
      await daemon.waitForOutput(/serving \/healthz, \/readyz and \/metrics on 127\.0\.0\.1:\d+ \(after \d+ failed attempt\(s\)\)/, 90_000);
      t.equal((await get(port, '/readyz')).status, 200, '/readyz answers once bound');
      t.match((await get(port, '/metrics')).body, /^kubeboot_status_listener_failures_total [1-9]\d*$/m, 'the failed attempts are counted');
      // A local user holding every connection it may: one past the cap is closed at once, the idle ones within seconds.
      let closed = 0;
      const held = await Promise.all(
        Array.from(
          { length: 65 },
          () =>
            new Promise<Socket>((resolve) => {
              const s = connect(port, '127.0.0.1', () => resolve(s));
              s.on('error', () => undefined);
              s.on('close', () => closed++);
              s.resume();
            }),
        ),
      );
      t.teardown(() => {
        for (const s of held) s.destroy();
      });
      await plane.admin.waitFor('every held connection to be closed', async () => (closed === held.length ? true : undefined), 30_000);
      t.equal((await get(port, '/readyz')).status, 200, 'and the endpoints answer again');
      await notify.waitFor((m) => /STATUS=credentials valid: [^;\n]*(; kube-proxy: valid until [^;\n]*)?$/m.test(m), 30_000);
    },
  );
}

/** On failure, the daemon's output explains more than a timeout does. */
async function withOutput<T>(daemon: Running, waiting: Promise<T>): Promise<T> {
  try {
    return await waiting;
  } catch (err) {
    process.stderr.write(`\n--- kubeboot output ---\n${daemon.output()}\n---\n`);
    throw err;
  }
}

/** A kubelet credential signed by the cluster CA that expired an hour ago. */
async function plantExpiredKubelet(plane: ControlPlane, node: NodeLayout): Promise<void> {
  const expired = await plane.mintClientCert({
    commonName: `system:node:${node.name}`,
    organizations: ['system:nodes'],
    notBefore: new Date(Date.now() - 3 * 3600_000),
    notAfter: new Date(Date.now() - 3600_000),
  });
  await mkdir(node.kubeletCertDir, { recursive: true, mode: 0o700 });
  const file = join(node.kubeletCertDir, 'kubelet-client-2020-01-01-00-00-00.pem');
  await writeFile(file, expired.certPem + expired.keyPem, { mode: 0o600 });
  const current = join(node.kubeletCertDir, 'kubelet-client-current.pem');
  await symlink(file, current);
  await writeFile(
    node.kubeletKubeconfig,
    renderClientKubeconfig({ server: plane.server, caPem: plane.caPem, certFile: current, keyFile: current, userName: 'default-auth' }),
    { mode: 0o600 },
  );
}
