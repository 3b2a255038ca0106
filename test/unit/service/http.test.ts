import t, { type Test } from 'tap';
import http from 'node:http';
import net from 'node:net';
import { silentLogger } from '../../../agent/log.js';
import {
  isLoopbackListen,
  keepListening,
  MAX_CONNECTIONS,
  startHttpServer,
  StatusListener,
  type Readiness,
} from '../../../agent/service/http.js';
import { FakeClock } from '../../support/fake-time.js';
import { until } from '../../support/until.js';
import { KubebootError } from '../../../agent/errors.js';
import { EXPOSITION_CONTENT_TYPE } from '../../../agent/daemon/exposition.js';
import { createMetrics } from '../../../agent/daemon/metrics.js';

const noMetrics = () => ({ contentType: EXPOSITION_CONTENT_TYPE, body: '' });

interface Got {
  status: number;
  type: string | undefined;
  body: string;
}

function get(port: number, path: string, method = 'GET'): Promise<Got> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path, method, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, type: res.headers['content-type'], body }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function start(t: Test, state: { healthy: boolean; readiness: Readiness }) {
  const server = await startHttpServer({
    port: 0,
    healthy: () => state.healthy,
    readiness: () => state.readiness,
    metrics: async () => ({ contentType: EXPOSITION_CONTENT_TYPE, body: '# TYPE kubeboot_test_total counter\nkubeboot_test_total 3\n' }),
    logger: silentLogger(),
  });
  t.teardown(() => server.close());
  return server;
}

t.test('healthz follows the daemon loop and readyz follows the certificates', async (t) => {
  const state = { healthy: true, readiness: { ready: false, detail: ['kubelet: no certificate yet'] } };
  const { address } = await start(t, state);
  t.equal(address.host, '127.0.0.1');
  const port = address.port;

  t.equal((await get(port, '/healthz')).status, 200);
  const notReady = await get(port, '/readyz');
  t.equal(notReady.status, 503);
  t.equal(notReady.body, 'kubelet: no certificate yet\n');

  state.readiness = { ready: true, detail: ['kubelet: valid until 2026-01-01T00:00:00Z'] };
  const ready = await get(port, '/readyz');
  t.equal(ready.status, 200);
  t.match(ready.body, /valid until/);

  state.healthy = false;
  t.equal((await get(port, '/healthz')).status, 503);
});

t.test('metrics serves what the metrics function renders, with its content type', async (t) => {
  const {
    address: { port },
  } = await start(t, { healthy: true, readiness: { ready: true, detail: [] } });
  const res = await get(port, '/metrics');
  t.equal(res.status, 200);
  t.match(res.type, /^text\/plain; version=0\.0\.4/);
  t.match(res.body, /^kubeboot_test_total 3$/m);
});

t.test('metrics is rendered afresh at every scrape, synchronously or not; a failure answers 500', async (t) => {
  const m = createMetrics({ certificates: () => [], processMetrics: false });
  let fail = false;
  const server = await startHttpServer({
    port: 0,
    readiness: () => ({ ready: true, detail: [] }),
    metrics: () => {
      if (fail) throw new Error('boom');
      return { contentType: m.contentType, body: m.render() };
    },
    logger: silentLogger(),
  });
  t.teardown(() => server.close());
  const port = server.address.port;
  t.notMatch((await get(port, '/metrics')).body, /^kubeboot_renewals_total/m, 'nothing renewed yet');
  m.recordRenewal('kubelet', new Date());
  const res = await get(port, '/metrics');
  t.equal(res.type, EXPOSITION_CONTENT_TYPE);
  t.match(res.body, /^kubeboot_renewals_total\{identity="kubelet"\} 1$/m, 'the renewal shows at the next scrape');
  fail = true;
  t.equal((await get(port, '/metrics')).status, 500);
  t.equal((await get(port, '/healthz')).status, 200, 'and the server keeps serving');
});

t.test('unknown paths are 404 and other methods 405', async (t) => {
  const {
    address: { port },
  } = await start(t, { healthy: true, readiness: { ready: true, detail: [] } });
  t.equal((await get(port, '/')).status, 404);
  t.equal((await get(port, '/healthz', 'POST')).status, 405);
  const head = await get(port, '/healthz', 'HEAD');
  t.equal(head.status, 200);
  t.equal(head.body, '');
});

t.test('a readiness callback that throws answers 500 and the server keeps serving', async (t) => {
  const server = await startHttpServer({
    port: 0,
    readiness: () => {
      throw new Error('boom');
    },
    metrics: noMetrics,
    logger: silentLogger(),
  });
  t.teardown(() => server.close());
  t.equal((await get(server.address.port, '/readyz')).status, 500);
  t.equal((await get(server.address.port, '/healthz')).status, 200);
});

t.test('a port already in use is reported with the address', async (t) => {
  const first = await start(t, { healthy: true, readiness: { ready: true, detail: [] } });
  const err = await startHttpServer({
    port: first.address.port,
    healthy: () => true,
    readiness: () => ({ ready: true, detail: [] }),
    metrics: noMetrics,
    logger: silentLogger(),
  }).then(
    () => null,
    (e: unknown) => e,
  );
  t.type(err, KubebootError);
  t.match((err as Error).message, `127.0.0.1:${first.address.port}`);
  t.match((err as Error).message, /EADDRINUSE/);
});

t.test('close stops accepting connections', async (t) => {
  const server = await startHttpServer({ port: 0, readiness: () => ({ ready: true, detail: [] }), metrics: noMetrics });
  const port = server.address.port;
  t.equal((await get(port, '/healthz')).status, 200);
  await server.close();
  await t.rejects(get(port, '/healthz'), { code: 'ECONNREFUSED' });
});

/** Sends raw bytes and returns the status line the server answers with. */
function rawRequest(port: number, request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.end(request));
    let got = '';
    socket.setEncoding('utf8');
    socket.on('data', (c: string) => (got += c));
    socket.on('end', () => resolve(got.split('\r\n')[0] ?? ''));
    socket.on('error', reject);
  });
}

t.test('a malformed request URL gets 400 and the server keeps answering', async (t) => {
  const { address } = await start(t, { healthy: true, readiness: { ready: true, detail: [] } });
  t.equal(await rawRequest(address.port, 'GET http://[ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'), 'HTTP/1.1 400 Bad Request');
  t.equal((await get(address.port, '/healthz')).status, 200);
});

t.test('the unauthenticated readyz body is scrubbed of tokens', async (t) => {
  const { address } = await start(t, {
    healthy: true,
    readiness: { ready: false, detail: ['kubelet: token abcdef.0123456789abcdef was refused'] },
  });
  const got = await get(address.port, '/readyz');
  t.equal(got.body, 'kubelet: token abcdef.[redacted] was refused\n');
});

t.test('only loopback listen addresses count as local', async (t) => {
  for (const listen of ['127.0.0.1:10271', '127.1.2.3:1', 'localhost:10271', '[::1]:10271', '[::ffff:127.0.0.1]:80'])
    t.ok(isLoopbackListen(listen), listen);
  for (const listen of ['0.0.0.0:10271', '[::]:10271', '10.0.0.7:10271', ':10271', 'example.com:80', '128.0.0.1:1'])
    t.notOk(isLoopbackListen(listen), listen);
});

t.test(
  'idle connections are capped: one past MAX_CONNECTIONS is closed on arrival, and the listener serves again once they go',
  async (t) => {
    const { address } = await start(t, { healthy: true, readiness: { ready: true, detail: [] } });
    const connect = () =>
      new Promise<net.Socket>((resolve, reject) => {
        const s = net.connect(address.port, '127.0.0.1', () => resolve(s));
        s.on('error', reject);
      });
    const idle: net.Socket[] = [];
    t.teardown(() => {
      for (const s of idle) s.destroy();
    });
    for (let i = 0; i < MAX_CONNECTIONS; i++) idle.push(await connect());
    const extra = await connect();
    await new Promise<void>((resolve) => extra.once('close', () => resolve()));
    t.pass(`connection ${MAX_CONNECTIONS + 1} was closed by the listener`);
    await Promise.all(idle.map((s) => new Promise<void>((resolve) => (s.once('close', () => resolve()), s.destroy()))));
    let status = 0;
    for (let attempt = 0; attempt < 50 && status !== 200; attempt++)
      status = await get(address.port, '/healthz').then(
        (r) => r.status,
        () => 0,
      );
    t.equal(status, 200, 'served again once the idle connections closed');
  },
);

t.test('connections a local user holds open: one past the cap is closed on arrival, idle ones within the header timeout', async (t) => {
  const server = await startHttpServer({
    port: 0,
    readiness: () => ({ ready: true, detail: [] }),
    metrics: noMetrics,
    logger: silentLogger(),
    headersTimeoutMs: 300,
  });
  t.teardown(() => server.close());
  const closed: number[] = [];
  const started = Date.now();
  const sockets = await Promise.all(
    Array.from(
      { length: MAX_CONNECTIONS + 1 },
      () =>
        new Promise<net.Socket>((resolve) => {
          const s = net.connect(server.address.port, '127.0.0.1', () => resolve(s));
          s.on('error', () => undefined);
          s.on('close', () => closed.push(Date.now() - started));
        }),
    ),
  );
  t.teardown(() => {
    for (const s of sockets) s.destroy();
  });
  // Every one of them sends nothing; Node checks the timeout every second.
  await until('every idle connection closed', () => closed.length === MAX_CONNECTIONS + 1, 10_000);
  t.ok(Math.max(...closed) < 5_000, `all closed within the header timeout and one check (${Math.max(...closed)} ms)`);
  t.equal((await get(server.address.port, '/healthz')).status, 200, 'and the endpoints answer again');
});

t.test('the status listener on a held port: fails without throwing, says when to retry, binds once freed', async (t) => {
  const holder = net.createServer();
  await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
  const port = (holder.address() as net.AddressInfo).port;
  const clock = new FakeClock(new Date('2026-01-01T00:00:00Z'));
  const problems: (string | null)[] = [];
  let failures = 0;
  const listener = new StatusListener(`127.0.0.1:${port}`, {
    readiness: () => ({ ready: true, detail: [] }),
    metrics: noMetrics,
    logger: silentLogger(),
    clock,
    random: () => 0,
    onFailure: () => failures++,
    onChange: (p) => problems.push(p),
  });
  t.teardown(() => listener.close());
  const stop = new AbortController();
  const loop = keepListening(listener, clock, stop.signal);
  await until('the first attempt', () => failures === 1);
  t.equal(listener.retryAt, clock.monotonic() + 1_000, 'the next attempt in 1 s');
  t.match(problems, [/cannot listen on 127\.0\.0\.1:\d+ .*EADDRINUSE.*\(attempt 1\)/]);
  await clock.tick(1_000);
  await until('the second attempt', () => failures === 2);
  t.equal(listener.retryAt, clock.monotonic() + 2_000, 'then in 2 s');
  await new Promise<void>((resolve) => holder.close(() => resolve()));
  await clock.tick(2_000);
  await loop;
  t.ok(listener.server, 'bound once the port is free');
  t.equal(listener.retryAt, null, 'nothing more to retry');
  t.equal(problems.at(-1), null, 'the problem cleared');
  t.equal((await get(port, '/healthz')).status, 200);
});
