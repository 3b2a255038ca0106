import t from 'tap';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import winston from 'winston';
import { Writable } from 'node:stream';
import { runHook, runIdentityHooks, STDERR_LIMIT } from '../../../agent/credential/hooks.js';
import { kubeletIdentity } from '../../support/identity.js';

t.test('a hook that exits 0 is ok', async (t) => {
  const r = await runHook(['/bin/true']);
  t.same(
    { ok: r.ok, exitCode: r.exitCode, signal: r.signal, timedOut: r.timedOut },
    { ok: true, exitCode: 0, signal: null, timedOut: false },
  );
  t.type(r.durationMs, 'number');
});

t.test('a hook that exits non-zero is a failure with its exit code and stderr', async (t) => {
  const r = await runHook(['/bin/sh', '-c', 'echo "cannot reload kubelet" >&2; exit 3']);
  t.equal(r.ok, false);
  t.equal(r.exitCode, 3);
  t.equal(r.stderr, 'cannot reload kubelet\n');
  t.equal((await runHook(['/bin/false'])).exitCode, 1);
});

t.test('arguments reach the hook verbatim, without a shell', async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), 'kubeboot-hooks-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const out = path.join(dir, 'out');
  const r = await runHook(['/bin/sh', '-c', 'printf "%s" "$1" > "$2"', 'sh', '$(rm -rf /); `x` *', out]);
  t.ok(r.ok);
  t.equal(await readFile(out, 'utf8'), '$(rm -rf /); `x` *');
});

t.test('a hook runs in /, not in the directory kubeboot was started from', async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), 'kubeboot-hooks-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const out = path.join(dir, 'cwd');
  t.ok((await runHook(['/bin/sh', '-c', 'pwd > "$1"', 'sh', out])).ok);
  t.equal(await readFile(out, 'utf8'), '/\n');
});

t.test('a hook that outlives its timeout is killed and reported as timed out', async (t) => {
  const r = await runHook(['sleep', '10'], { timeoutMs: 200 });
  t.equal(r.ok, false);
  t.equal(r.timedOut, true);
  t.equal(r.signal, 'SIGTERM');
});

t.test('a hook ignoring SIGTERM is killed with SIGKILL after the grace period', async (t) => {
  // The timeout leaves sh ample time to install its trap first; with less,
  // a busy machine delivers SIGTERM before the trap and the shell just dies.
  const r = await runHook(['/bin/sh', '-c', 'trap "" TERM; while :; do sleep 0.05; done'], { timeoutMs: 2000, killGraceMs: 100 });
  t.equal(r.timedOut, true);
  t.equal(r.signal, 'SIGKILL');
});

t.test('a missing binary is a failure that says why', async (t) => {
  const r = await runHook(['/nonexistent/reload-kubelet']);
  t.equal(r.ok, false);
  t.match(r.error, /ENOENT/);
  t.equal(await runHook([]).then((x) => x.error), 'empty hook command');
});

t.test('only the first 2 KB of stderr is kept, and a chatty hook still succeeds', async (t) => {
  const r = await runHook(['/bin/sh', '-c', 'head -c 1000000 /dev/zero | tr "\\0" x >&2; head -c 100000 /dev/zero']);
  t.ok(r.ok);
  t.equal(r.stderr.length, STDERR_LIMIT);
});

t.test('identity hooks run in order with the identity in their environment, failures logged', async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), 'kubeboot-hooks-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const out = path.join(dir, 'env');
  const identity = kubeletIdentity({
    hooks: [['/bin/sh', '-c', 'echo "$KUBEBOOT_IDENTITY $KUBEBOOT_CERT_FILE $KUBEBOOT_KUBECONFIG" > "$0"', out], ['/bin/false']],
  });
  const lines: string[] = [];
  const logger = winston.createLogger({
    format: winston.format.json(),
    transports: [new winston.transports.Stream({ stream: new Writable({ write: (c, _e, cb) => (lines.push(String(c)), cb()) }) })],
  });
  const results = await runIdentityHooks(identity, logger, { timeoutMs: 10_000 });
  t.same(
    results.map((r) => r.ok),
    [true, false],
  );
  t.equal(await readFile(out, 'utf8'), 'kubelet /var/lib/kubelet/pki/kubelet-client-current.pem /etc/kubernetes/kubelet.conf\n');
  t.equal(lines.length, 1);
  t.match(JSON.parse(lines[0] ?? '{}'), { message: 'hook failed', identity: 'kubelet', exitCode: 1 });
});

t.test('stopping kubeboot stops a running hook instead of waiting out its timeout', async (t) => {
  const stopping = new AbortController();
  const running = runHook(['/bin/sleep', '30'], { timeoutMs: 60_000, signal: stopping.signal });
  stopping.abort();
  const result = await running;
  t.equal(result.ok, false);
  t.equal(result.timedOut, false, 'not reported as a timeout');
  t.equal(result.signal, 'SIGTERM', 'the hook got SIGTERM');
});

t.test('identity hooks get a clean environment: no systemd notify socket, watchdog or kubeboot settings', async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), 'kubeboot-hooks-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const out = path.join(dir, 'env');
  const identity = kubeletIdentity({ hooks: [['/bin/sh', '-c', 'env > "$0"', out]] });
  const env = {
    PATH: '/usr/bin:/bin',
    LANG: 'C.UTF-8',
    NOTIFY_SOCKET: '/run/systemd/notify',
    WATCHDOG_USEC: '30000000',
    WATCHDOG_PID: '1',
    KUBEBOOT_NODE_NAME: 'x',
    SECRET_THING: 'y',
  };
  const results = await runIdentityHooks(identity, winston.createLogger({ silent: true }), { timeoutMs: 10_000, env });
  t.ok(results[0]?.ok);
  const seen = Object.fromEntries(
    (await readFile(out, 'utf8'))
      .trim()
      .split('\n')
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );
  for (const name of ['NOTIFY_SOCKET', 'WATCHDOG_USEC', 'WATCHDOG_PID', 'KUBEBOOT_NODE_NAME', 'SECRET_THING'])
    t.notOk(name in seen, `${name} is not passed`);
  t.equal(seen.PATH, '/usr/bin:/bin');
  t.equal(seen.LANG, 'C.UTF-8');
  t.equal(seen.KUBEBOOT_IDENTITY, 'kubelet');
});
