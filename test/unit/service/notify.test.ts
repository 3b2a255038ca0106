import t, { type Test } from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { silentLogger } from '../../../agent/log.js';
import { FakeClock } from '../../support/fake-time.js';
import { createNotifier, startWatchdog, watchdogIntervalMs, type NotifyExec } from '../../../agent/service/notify.js';
import { listenNotifySocket } from '../../support/notify-socket.js';

const logger = silentLogger();

async function tempDir(t: Test): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), 'kubeboot-notify-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

for (const abstract of [false, true]) {
  t.test(`systemd receives READY=1 and the status only once ready() is called (${abstract ? 'abstract' : 'path'} socket)`, async (t) => {
    const socket = await listenNotifySocket(await tempDir(t), { abstract });
    t.teardown(() => socket.close());
    const notifier = createNotifier({ env: { NOTIFY_SOCKET: socket.path, PATH: process.env.PATH }, logger });
    t.ok(notifier.enabled);
    t.same(socket.messages(), [], 'nothing sent before ready()');

    t.equal(await notifier.ready('kubelet certificate valid until 2026-01-01'), true);
    const msg = await socket.waitFor((m) => m.includes('READY=1'));
    t.match(msg, /^STATUS=kubelet certificate valid until 2026-01-01$/m);

    t.equal(await notifier.status('renewing kubelet\nnow'), true);
    await socket.waitFor((m) => m.split('\n').includes('STATUS=renewing kubelet now'));
    t.equal(await notifier.watchdog(), true);
    await socket.waitFor((m) => m.split('\n').includes('WATCHDOG=1'));
    t.equal(await notifier.stopping('shutting down'), true);
    await socket.waitFor((m) => m.split('\n').includes('STOPPING=1'));
  });
}

t.test('without NOTIFY_SOCKET nothing is executed', async (t) => {
  const calls: string[][] = [];
  const exec: NotifyExec = async (_file, args) => void calls.push(args);
  const notifier = createNotifier({ env: {}, logger, exec });
  t.notOk(notifier.enabled);
  t.equal(await notifier.ready('x'), false);
  t.equal(await notifier.watchdog(), false);
  t.same(calls, []);
});

t.test('a failing systemd-notify is reported as false, not thrown', async (t) => {
  const exec: NotifyExec = async () => {
    throw new Error('Failed to notify init system: No such file or directory');
  };
  const notifier = createNotifier({ env: { NOTIFY_SOCKET: '/nonexistent/notify' }, logger, exec });
  t.equal(await notifier.ready('up'), false);
});

t.test('the real binary fails cleanly when the socket does not exist', async (t) => {
  const dir = await tempDir(t);
  const notifier = createNotifier({ env: { NOTIFY_SOCKET: path.join(dir, 'missing.sock'), PATH: process.env.PATH }, logger });
  t.equal(await notifier.status('hello'), false);
});

t.test('only NOTIFY_SOCKET and PATH reach systemd-notify', async (t) => {
  let seen: NodeJS.ProcessEnv = {};
  const exec: NotifyExec = async (_f, _a, env) => void (seen = env);
  const notifier = createNotifier({ env: { NOTIFY_SOCKET: '@x', PATH: '/bin', SECRET: 'token' }, logger, exec });
  await notifier.watchdog();
  t.same(seen, { NOTIFY_SOCKET: '@x', PATH: '/bin' });
});

t.test('the watchdog interval is half of WATCHDOG_USEC and honours WATCHDOG_PID', async (t) => {
  t.equal(watchdogIntervalMs({ WATCHDOG_USEC: '20000000' }, 42), 10_000);
  t.equal(watchdogIntervalMs({ WATCHDOG_USEC: '20000000', WATCHDOG_PID: '42' }, 42), 10_000);
  t.equal(watchdogIntervalMs({ WATCHDOG_USEC: '20000000', WATCHDOG_PID: '7' }, 42), null, 'meant for another process');
  t.equal(watchdogIntervalMs({}, 42), null);
  t.equal(watchdogIntervalMs({ WATCHDOG_USEC: '0' }, 42), null);
  t.equal(watchdogIntervalMs({ WATCHDOG_USEC: 'abc' }, 42), null);
});

t.test('the watchdog pings at once and then every half interval until stopped', async (t) => {
  const clock = new FakeClock();
  let pings = 0;
  const exec: NotifyExec = async (_f, args) => {
    if (args.includes('WATCHDOG=1')) pings++;
  };
  const notifier = createNotifier({ env: { NOTIFY_SOCKET: '@x' }, logger, exec });
  const dog = startWatchdog(notifier, { env: { WATCHDOG_USEC: '10000000' }, pid: 1, clock });
  t.ok(dog);
  await clock.tick(0);
  t.equal(pings, 1);
  await clock.tick(5000 * 3);
  t.equal(pings, 4);
  dog?.stop();
  await clock.tick(5000 * 3);
  t.equal(pings, 4, 'no ping after stop');
  t.equal(clock.pending, 0);
});

t.test('the watchdog withholds pings while the daemon reports itself unhealthy', async (t) => {
  const clock = new FakeClock();
  let pings = 0;
  let healthy = true;
  const exec: NotifyExec = async () => void pings++;
  const notifier = createNotifier({ env: { NOTIFY_SOCKET: '@x' }, logger, exec });
  const dog = startWatchdog(notifier, { env: { WATCHDOG_USEC: '2000000' }, pid: 1, clock, healthy: () => healthy });
  t.teardown(() => dog?.stop());
  await clock.tick(0);
  healthy = false;
  await clock.tick(5000);
  t.equal(pings, 1);
  healthy = true;
  await clock.tick(1000);
  t.equal(pings, 2);
});

t.test('no watchdog without WATCHDOG_USEC or without a notify socket', async (t) => {
  const exec: NotifyExec = async () => {};
  t.equal(startWatchdog(createNotifier({ env: { NOTIFY_SOCKET: '@x' }, logger, exec }), { env: {} }), null);
  t.equal(startWatchdog(createNotifier({ env: {}, logger, exec }), { env: { WATCHDOG_USEC: '1000000' } }), null);
});

t.test('a status carrying a token or key is scrubbed before it reaches systemd', async (t) => {
  const sent: string[][] = [];
  const exec: NotifyExec = async (_file, args) => void sent.push(args);
  const notifier = createNotifier({ env: { NOTIFY_SOCKET: '/run/x' }, logger, exec });
  await notifier.status('kubelet: abcdef.0123456789abcdef rejected; Bearer s3cr3t-value');
  t.same(sent, [['--status=kubelet: abcdef.[redacted] rejected; Bearer [redacted]']]);
});
