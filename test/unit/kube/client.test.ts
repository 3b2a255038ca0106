import t, { type Test } from 'tap';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { KubeClient, MAX_BODY_BYTES, MAX_WATCH_LINE_BYTES } from '../../../agent/kube/client.js';
import { discoverClusterCa } from '../../../agent/kube/discovery.js';
import { silentLogger } from '../../../agent/log.js';

/** Streams `total` bytes of `fill` (chunked, no content-length unless asked), stopping when the client goes away. */
function bigBody(res: http.ServerResponse, total: number, fill: string, contentLength = false): void {
  res.writeHead(200, { 'content-type': 'application/json', ...(contentLength ? { 'content-length': String(total) } : {}) });
  const chunk = Buffer.alloc(64 << 10, fill);
  let sent = 0;
  const pump = (): void => {
    while (sent < total) {
      sent += chunk.length;
      if (!res.write(chunk)) return void res.once('drain', pump);
    }
    res.end();
  };
  res.on('error', () => undefined);
  res.socket?.on('error', () => undefined);
  pump();
}

async function serve(t: Test, handler: http.RequestListener): Promise<string> {
  const server = http.createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => (server.closeAllConnections(), server.close(() => resolve()))));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

t.test('a response body over the cap is refused while streaming, with a clear error', async (t) => {
  const server = await serve(t, (_req, res) => bigBody(res, 64 << 20, ' '));
  const client = new KubeClient({ server, caPem: null }, { kind: 'anonymous' });
  t.teardown(() => client.close());
  const before = process.memoryUsage().rss;
  await t.rejects(client.request('GET', '/api/v1/namespaces/default'), {
    message: `GET /api/v1/namespaces/default: response body exceeds ${MAX_BODY_BYTES} bytes; refusing it`,
  });
  t.ok(process.memoryUsage().rss - before < 48 << 20, 'not buffered whole');
});

t.test('a declared content-length over the cap is refused before reading', async (t) => {
  const server = await serve(t, (_req, res) => bigBody(res, 200 << 20, ' ', true));
  const client = new KubeClient({ server, caPem: null }, { kind: 'anonymous' });
  t.teardown(() => client.close());
  await t.rejects(client.request('GET', '/x', { maxBodyBytes: 1024 }), {
    message: `GET /x: response body is ${200 << 20} bytes; at most 1024 are read`,
  });
});

t.test('a watch line over the cap ends the watch with a clear error', async (t) => {
  const server = await serve(t, (_req, res) => bigBody(res, MAX_WATCH_LINE_BYTES * 2, 'a'));
  const client = new KubeClient({ server, caPem: null }, { kind: 'anonymous' });
  t.teardown(() => client.close());
  const events = client.watch('/apis/certificates.k8s.io/v1/certificatesigningrequests', {}, new AbortController().signal);
  await t.rejects(
    (async () => {
      for await (const _ of events) void _;
    })(),
    {
      message: `WATCH /apis/certificates.k8s.io/v1/certificatesigningrequests: an event line exceeds ${MAX_WATCH_LINE_BYTES} bytes; refusing it`,
    },
  );
});

t.test('CA discovery refuses an oversized cluster-info instead of buffering it', async (t) => {
  let requests = 0;
  const server = await serve(t, (_req, res) => {
    requests++;
    bigBody(res, 32 << 20, ' ');
  });
  const err = (await discoverClusterCa({
    server,
    tlsServerName: null,
    tokenId: 'abcdef',
    tokenSecret: '0123456789abcdef',
    pins: ['sha256:' + '0'.repeat(64)],
    unsafeSkipCaVerification: false,
    timeoutMs: 1_000,
    logger: silentLogger(),
  }).catch((e: unknown) => e)) as Error;
  t.match(
    err.message,
    /cannot read kube-public\/cluster-info \(GET \/api\/v1\/namespaces\/kube-public\/configmaps\/cluster-info: response body exceeds 1048576 bytes; refusing it\)/,
  );
  t.equal(requests, 1);
});

t.test('a watch yields a line at the cap sent in small writes, and many tiny lines, each once', async (t) => {
  // How the lines are found (each chunk searched once) is watch-lines.test.ts's; this is the client around it.
  const path = '/apis/certificates.k8s.io/v1/certificatesigningrequests';
  const drain = async (server: string): Promise<{ events: number; error?: string }> => {
    const client = new KubeClient({ server, caPem: null }, { kind: 'anonymous' });
    let events = 0;
    try {
      for await (const _ of client.watch(path, {}, new AbortController().signal)) events++;
      return { events };
    } catch (err) {
      return { events, error: (err as Error).message };
    } finally {
      await client.close();
    }
  };
  const line = `{"type":"ADDED","object":{"metadata":{"name":"${'x'.repeat(MAX_WATCH_LINE_BYTES - 64)}"}}}\n`;
  const oneLongLine = await serve(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    for (let at = 0; at < line.length; at += 1024) res.write(line.slice(at, at + 1024));
    res.end();
  });
  const long = await drain(oneLongLine);
  t.same(long, { events: 1 }, `one event of ${line.length} bytes in 1 KiB writes`);
  const tiny = '{"type":"BOOKMARK","object":{"metadata":{}}}\n';
  const count = Math.floor(MAX_BODY_BYTES / tiny.length);
  const manyLines = await serve(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(tiny.repeat(count));
  });
  t.same(await drain(manyLines), { events: count }, `${count} events`);
});
