// kill -9 at random moments of a bootstrap and of a renewal, against the real
// control plane. After every kill the files on disk must still make sense
// (no link to a missing or torn credential, no kubeconfig pointing nowhere),
// and one clean rerun must finish with exactly one CSR per attempt chain and
// no temp file left behind. Then the same against `kubeboot run`: kill -9 of
// its worker process (the daemon must start another by itself and finish the
// job) and of the daemon (its orphaned worker must end by itself, and a new
// daemon finish the job). `npm run test:chaos` runs many more points.
import { execFile } from 'node:child_process';
import { lstat, readdir, readFile, readlink, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { promisify } from 'node:util';
import t, { type Test } from 'tap';
import { parseClientKubeconfig } from '../../agent/kubeconfig/parse.js';
import { keyMatchesCertificate, parsePrivateKey } from '../../agent/pki/keys.js';
import { readOptional } from '../../agent/read-optional.js';
import { splitCredential } from '../../agent/store/cert-store.js';
import type { KubeObject } from '../support/admin.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { assertNoSecrets, handToken, kubeboot, nodeLayout, startKubeboot, type NodeLayout, type Running } from '../support/kubeboot.js';
import { prng } from '../support/prng.js';

const run = promisify(execFile);
const POINTS = Number(process.env.KUBEBOOT_CHAOS_POINTS ?? 6);

const seed = Number(process.env.KUBEBOOT_CHAOS_SEED ?? Date.now() % 100_000);
const random = prng(seed);
t.comment(`chaos seed ${seed} (replay with KUBEBOOT_CHAOS_SEED=${seed}), ${POINTS} kill points per phase`);

/** What must hold on disk at any instant: the link resolves to a whole credential whose key fits, and the kubeconfig points at it. */
async function assertConsistent(t: Test, node: NodeLayout, when: string): Promise<void> {
  const link = join(node.kubeletCertDir, 'kubelet-client-current.pem');
  const linkStat = await lstat(link).catch(() => null);
  if (linkStat) {
    t.ok(linkStat.isSymbolicLink(), `${when}: -current.pem is a link`);
    const target = await readlink(link);
    const credential = splitCredential(await readFile(target, 'utf8').catch(() => ''));
    t.ok(credential, `${when}: the link points at a complete credential (${target})`);
    if (credential)
      t.ok(keyMatchesCertificate(await parsePrivateKey(credential.keyPem), credential.certPem), `${when}: its key fits its certificate`);
  }
  const kubeconfig = await readOptional(node.kubeletKubeconfig);
  if (kubeconfig !== null) {
    const parsed = await parseClientKubeconfig(node.kubeletKubeconfig, kubeconfig, readOptional).catch((err: Error) => err);
    t.notOk(parsed instanceof Error, `${when}: kubelet.conf parses, with the credential it names present`);
  }
}

async function tempFiles(dirs: string[]): Promise<string[]> {
  const found: string[] = [];
  for (const dir of dirs)
    for (const name of await readdir(dir).catch(() => [] as string[])) if (name.includes('.tmp-')) found.push(join(dir, name));
  return found;
}

/** A process as /proc shows it: the start time (field 22) tells it from a later one with the same pid. */
interface Proc {
  pid: number;
  start: string;
}

/** State (field 3), parent (field 4) and start time (field 22) from /proc/<pid>/stat; null once the pid is gone. */
async function procStat(pid: number): Promise<{ state: string; ppid: number; start: string } | null> {
  try {
    const text = await readFile(`/proc/${pid}/stat`, 'utf8');
    // Field 2 (comm) is parenthesised and may hold spaces; fields 3… follow the last ')'.
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    return { state: fields[0]!, ppid: Number(fields[1]), start: fields[19]! };
  } catch {
    return null;
  }
}

/** Whether `proc` still runs: neither gone nor a zombie (an orphan's reaper may be slow to reap it). */
async function running(proc: Proc): Promise<boolean> {
  const now = await procStat(proc.pid);
  return now !== null && now.start === proc.start && now.state !== 'Z';
}

/**
 * The worker processes (`kubeboot __worker`) `daemon` runs now. From /proc, not
 * kubeboot-worker.pid: a worker writes that file only once it has its start
 * message, and a SIGKILLed worker leaves it behind.
 */
async function workersOf(daemon: number): Promise<Proc[]> {
  const found: Proc[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    const s = await procStat(pid);
    if (s === null || s.ppid !== daemon || s.state === 'Z') continue;
    const argv = (await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')).split('\0');
    if (argv.includes('__worker')) found.push({ pid, start: s.start });
  }
  return found;
}

/** Polls `probe` every 20 ms until it gives a value (process births and deaths have no event to wait on). */
async function poll<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await delay(20);
  }
}

const plane = await controlPlaneOrSkip(t, { name: 'chaos' });
if (plane) {
  const kubectl = plane.kubectlPath!;
  const whoami = async (kubeconfig: string) =>
    JSON.parse((await run(kubectl, ['--kubeconfig', kubeconfig, 'auth', 'whoami', '-o', 'json'])).stdout).status.userInfo
      .username as string;
  const csrsOf = async (node: string) => (await plane.admin.listCsrs()).filter((c) => csrNode(c) === node);

  /** How long one uninterrupted run takes, so kill points spread over the whole of it. */
  async function span(args: (node: NodeLayout) => string[], prepare: (node: NodeLayout) => Promise<void>, name: string): Promise<number> {
    const node = await nodeLayout(t.testdir(), name);
    await prepare(node);
    const started = performance.now();
    const result = await kubeboot(t, args(node));
    if (result.code !== 0) throw new Error(`the reference run failed: ${result.stderr}`);
    return performance.now() - started;
  }

  const bootstrapArgs = (node: NodeLayout) => ['bootstrap', '--config', node.config];
  const renewArgs = (node: NodeLayout) => ['renew', '--config', node.config];
  const fresh = async (node: NodeLayout) => void (await handToken(plane, node, 'data'));
  const bootstrapped = async (node: NodeLayout) => {
    await handToken(plane, node, 'data');
    const first = await kubeboot(t, bootstrapArgs(node));
    if (first.code !== 0) throw new Error(first.stderr);
  };

  for (const phase of [
    { name: 'bootstrap', args: bootstrapArgs, prepare: fresh, csrs: 1 },
    { name: 'renewal', args: renewArgs, prepare: bootstrapped, csrs: 2 },
  ]) {
    t.test(
      `kill -9 at ${POINTS} random moments of a ${phase.name}: files stay usable, one rerun finishes with no second CSR`,
      async (t) => {
        const whole = await span(phase.args, phase.prepare, `chaos-${phase.name}-ref`);
        for (let i = 0; i < POINTS; i++) {
          const name = `chaos-${phase.name}-${i}`;
          const dir = join(t.testdir(), String(i));
          const node = await nodeLayout(dir, name);
          await phase.prepare(node);
          const link = join(node.kubeletCertDir, 'kubelet-client-current.pem');
          const before = await readlink(link).catch(() => null);
          const killAfter = Math.round(random() * whole * 1.2);
          const victim = startKubeboot(phase.args(node));
          const timer = setTimeout(() => victim.child.kill('SIGKILL'), killAfter);
          const ended = await victim.done;
          clearTimeout(timer);
          const when = `${phase.name} killed at ${killAfter} ms (${ended.signal ?? `exit ${ended.code}`})`;
          await assertConsistent(t, node, when);
          // A renewal that finished before the kill (new link, no pending key) makes the rerun a second, legitimate renewal.
          const renewedBeforeKill =
            phase.name === 'renewal' &&
            (await readlink(link).catch(() => null)) !== before &&
            (await readOptional(join(node.stateDir, 'kubelet.key.pending'))) === null;

          const rerun = await kubeboot(t, phase.args(node));
          t.equal(rerun.code, 0, `${when}: the rerun succeeds`);
          t.equal(await whoami(node.kubeletKubeconfig), `system:node:${name}`, `${when}: kubelet.conf works`);
          const csrs = (await csrsOf(name)).length;
          t.equal(
            csrs,
            phase.csrs + (renewedBeforeKill ? 1 : 0),
            `${when}: ${csrs} CSR(s): the rerun adopted an interrupted attempt's CSR instead of filing another`,
          );
          t.same(await tempFiles([node.kubeletCertDir, node.stateDir, dir]), [], `${when}: no temp file left after the rerun`);
          await stat(node.bootstrapKubeconfig).then(
            () => t.fail(`${when}: the bootstrap kubeconfig is gone after the rerun`),
            () => t.pass(`${when}: the bootstrap kubeconfig is gone after the rerun`),
          );
        }
      },
    );
  }

  // kubeboot run: a daemon that forks a worker process (`kubeboot __worker`) for the work.
  const runArgs = (node: NodeLayout) => ['run', '--config', node.config, '--listen', 'off'];
  const workerPidFile = (node: NodeLayout) => join(node.stateDir, 'kubeboot-worker.pid');
  const failedWorkers = (output: string) => output.match(/a worker ended without finishing its steps \([^)]*\)/g) ?? [];
  /** The node's CSRs: the kubelet's (CN system:node:<name>) and any it filed with its own credential (kube-proxy's). */
  const csrsFor = async (node: string) =>
    (await plane.admin.listCsrs()).filter((c) => csrNode(c) === node || c.spec?.username === `system:node:${node}`);

  /** `kubeboot run` on `node`; whatever is left of it is killed at the end of the test (a worker ends once its daemon is gone). */
  function startDaemon(t: Test, node: NodeLayout): Running {
    const daemon = startKubeboot(runArgs(node));
    t.teardown(() => void (daemon.child.exitCode === null && daemon.child.signalCode === null && daemon.child.kill('SIGKILL')));
    return daemon;
  }

  /** How far a bootstrap had got, from its files: what a kill point hit. */
  const stage = async (node: NodeLayout) =>
    (await lstat(join(node.kubeletCertDir, 'kubelet-client-current.pem')).catch(() => null))
      ? 'certificate written'
      : (await readOptional(join(node.stateDir, 'kubelet.key.pending'))) !== null
        ? 'CSR pending'
        : 'before the CSR';

  /** Its first worker, once forked. */
  const firstWorker = (daemon: Running) => poll('the first worker', async () => (await workersOf(daemon.child.pid!))[0], 60_000);
  const gone = (what: string, proc: Proc, timeoutMs: number) =>
    poll(what, async () => ((await running(proc)) ? undefined : true), timeoutMs);

  /** SIGTERM, then everything it (and its workers) printed: no secret in it, and how many workers ended without finishing. */
  async function stopDaemon(t: Test, daemon: Running, when: string): Promise<number> {
    daemon.child.kill('SIGTERM');
    const end = await daemon.done;
    assertNoSecrets(t, end.stdout + end.stderr, `${when}: kubeboot run`);
    return failedWorkers(end.stdout + end.stderr).length;
  }

  /** What must hold once the node is done: every identity valid, kubelet.conf works, as many CSRs as an undisturbed run, nothing left over. */
  async function assertFinished(t: Test, node: NodeLayout, when: string, csrs: number): Promise<void> {
    const status = await kubeboot(t, ['status', '--config', node.config, '--output', 'json']);
    for (const s of JSON.parse(status.stdout).identities as { identity: string; expired: boolean | null; pendingCsr: unknown }[]) {
      t.equal(s.expired, false, `${when}: kubeboot status shows ${s.identity} valid`);
      t.equal(s.pendingCsr, null, `${when}: and no CSR pending for it`);
    }
    t.equal(await whoami(node.kubeletKubeconfig), `system:node:${node.name}`, `${when}: kubelet.conf works`);
    t.equal((await csrsOf(node.name)).length, 1, `${when}: one CSR for the kubelet`);
    const filed = (await csrsFor(node.name)).length;
    t.equal(filed, csrs, `${when}: ${filed} CSR(s) in all, as an undisturbed run files`);
    t.same(await tempFiles([node.kubeletCertDir, node.kubeProxyCertDir, node.stateDir, node.dir]), [], `${when}: no temp file left`);
    await stat(node.bootstrapKubeconfig).then(
      () => t.fail(`${when}: the bootstrap kubeconfig is gone`),
      () => t.pass(`${when}: the bootstrap kubeconfig is gone`),
    );
  }

  /** One undisturbed `kubeboot run` on a fresh node: how long its first worker lives, and how many CSRs it files. */
  let reference: Promise<{ workerMs: number; csrs: number }> | undefined;
  const daemonReference = (t: Test) =>
    (reference ??= (async () => {
      const node = await nodeLayout(t.testdir(), 'chaos-run-ref');
      await fresh(node);
      const daemon = startDaemon(t, node);
      const worker = await firstWorker(daemon);
      const started = performance.now();
      await gone('the first worker to end', worker, 180_000);
      const workerMs = performance.now() - started;
      await daemon.waitForOutput(/all credentials valid/, 60_000);
      const csrs = (await csrsFor(node.name)).length;
      if ((await stopDaemon(t, daemon, 'the reference run')) !== 0)
        throw new Error(`the reference run had a worker fail:\n${daemon.output()}`);
      t.comment(`reference kubeboot run: first worker ${Math.round(workerMs)} ms, ${csrs} CSR(s)`);
      return { workerMs, csrs };
    })());

  // Each daemon phase draws its own stream from the seed, so `tap --grep` replays one alone.
  t.test(
    `kill -9 of the worker at ${POINTS} random moments of kubeboot run's first worker: the daemon starts another by itself, which finishes with no second CSR`,
    async (t) => {
      const random = prng(seed + 1);
      const ref = await daemonReference(t);
      let killed = 0;
      let restedKills = 0;
      for (let i = 0; i < POINTS; i++) {
        const node = await nodeLayout(join(t.testdir(), String(i)), `chaos-worker-${i}`);
        await fresh(node);
        const daemon = startDaemon(t, node);
        const worker = await firstWorker(daemon);
        const killAfter = Math.round(random() * ref.workerMs * 1.2);
        await delay(killAfter);
        const midWorker = await running(worker);
        if (midWorker) process.kill(worker.pid, 'SIGKILL');
        // Reaped, not merely a zombie: the daemon logs how the worker ended in the turn it reaps it.
        await poll(
          'the daemon to reap the worker',
          async () => ((await procStat(worker.pid))?.start === worker.start ? undefined : true),
          10_000,
        );
        const at = await stage(node);
        // A worker killed after it was told to stop had answered its steps: the daemon counts it as finished.
        const unfinished =
          midWorker &&
          (await daemon.waitForOutput(/a worker ended without finishing its steps \(signal SIGKILL\)/, 5_000).then(
            () => true,
            () => false,
          ));
        const when = !midWorker
          ? `worker not killed at ${killAfter} ms (it had ended)`
          : unfinished
            ? `worker killed ${killAfter} ms in (${at})`
            : `worker killed ${killAfter} ms in, after it was told to stop (${at})`;
        await assertConsistent(t, node, when);
        if (unfinished) {
          killed++;
          t.match(
            daemon.output(),
            /ended without finishing its steps \(signal SIGKILL\); starting another in 5s/,
            `${when}: the daemon logged that the worker ended without finishing`,
          );
          const again = await poll(
            'the daemon to start another worker',
            async () => (await workersOf(daemon.child.pid!)).find((p) => p.pid !== worker.pid || p.start !== worker.start),
            60_000,
          );
          await gone('the new worker to end', again, 180_000);
          t.notOk(await readOptional(workerPidFile(node)), `${when}: the new worker ended by itself (it removed its pid file)`);
        } else if (midWorker) restedKills++;
        await daemon.waitForOutput(/all credentials valid/, 60_000);
        t.equal(daemon.child.exitCode, null, `${when}: the same daemon still runs, all credentials valid`);
        await assertFinished(t, node, when, ref.csrs);
        t.equal(await stopDaemon(t, daemon, when), unfinished ? 1 : 0, `${when}: no other worker failed`);
      }
      t.comment(
        `of ${POINTS} kill points: ${killed} stopped the first worker unfinished, ${restedKills} hit it after it was told to stop, the others came after it ended`,
      );
    },
  );

  t.test(
    `kill -9 of the daemon at ${POINTS} random moments of its first worker: the orphaned worker ends by itself, a new kubeboot run finishes with no second CSR`,
    async (t) => {
      const random = prng(seed + 2);
      const ref = await daemonReference(t);
      let orphans = 0;
      for (let i = 0; i < POINTS; i++) {
        const node = await nodeLayout(join(t.testdir(), String(i)), `chaos-daemon-${i}`);
        await fresh(node);
        const daemon = startDaemon(t, node);
        const worker = await firstWorker(daemon);
        const killAfter = Math.round(random() * ref.workerMs * 1.2);
        await delay(killAfter);
        const orphaned = await running(worker);
        daemon.child.kill('SIGKILL');
        const at = await stage(node);
        const when = orphaned
          ? `daemon killed ${killAfter} ms into its first worker (${at})`
          : `daemon killed ${killAfter} ms after its first worker began (it had ended)`;
        if (orphaned) {
          orphans++;
          const killedAt = performance.now();
          const ended = await gone('the orphaned worker to end', worker, 60_000).catch(() => false);
          t.ok(ended, `${when}: the orphaned worker ended by itself (${Math.round(performance.now() - killedAt)} ms)`);
          if (!ended) process.kill(worker.pid, 'SIGKILL');
        }
        // Closes once the orphan has let go of the output it inherited.
        const end = await daemon.done;
        t.equal(end.signal, 'SIGKILL', `${when}: the daemon died by SIGKILL`);
        assertNoSecrets(t, end.stdout + end.stderr, `${when}: kubeboot run`);
        await assertConsistent(t, node, when);

        const rerun = startDaemon(t, node);
        await rerun.waitForOutput(/all credentials valid/, 120_000);
        await poll('the new daemon to rest', async () => ((await workersOf(rerun.child.pid!)).length === 0 ? true : undefined), 180_000);
        t.notOk(await readOptional(workerPidFile(node)), `${when}: the new daemon's worker ended by itself (it removed its pid file)`);
        await assertFinished(t, node, when, ref.csrs);
        t.equal(await stopDaemon(t, rerun, when), 0, `${when}: no worker of the new daemon failed`);
      }
      t.comment(`${orphans} of ${POINTS} kills left an orphaned worker`);
    },
  );
}

/** The node a CSR is for, from its request's CN (system:node:<name>). */
function csrNode(csr: KubeObject): string {
  const der = Buffer.from(
    Buffer.from(String(csr.spec?.request ?? ''), 'base64')
      .toString()
      .replace(/-----[^-]+-----/g, '')
      .replace(/\s+/g, ''),
    'base64',
  );
  const at = der.indexOf(Buffer.from([0x06, 0x03, 0x55, 0x04, 0x03]));
  if (at < 0) return '';
  const cn = der.subarray(at + 7, at + 7 + der[at + 6]!).toString('utf8');
  return cn.startsWith('system:node:') ? cn.slice('system:node:'.length) : '';
}
