/**
 * Optional status listener: /healthz (the daemon loop is alive), /readyz
 * (every identity holds a valid certificate) and /metrics (Prometheus text).
 *
 * Default port 10271: the neighbours are taken — 10248 kubelet healthz, 10249
 * kube-proxy metrics, 10250 kubelet, 10255 kubelet read-only, 10256
 * kube-proxy healthz, 10257 kube-controller-manager, 10258
 * cloud-controller-manager, 10259 kube-scheduler, 10260 cloud-controller-
 * manager webhook (pkg/cluster/ports). Loopback only unless configured.
 */
// getBuiltinModule, not an import: an ES import of node:http evaluates its
// lazy WebSocket getters, which load Node's bundled undici (docs/benchmarks.md).
const http = process.getBuiltinModule('node:http');
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { KubebootError } from '../errors.js';
import type { Log } from '../log-lines.js';
import { scrub } from '../redact.js';
import type { Readiness } from './report.js';

export const DEFAULT_HTTP_HOST = '127.0.0.1';
export const DEFAULT_HTTP_PORT = 10271;

/**
 * Whether a `listen` address (`host:port`, `[v6]:port`) stays on this host.
 * The endpoints are unauthenticated, so anything else is worth a warning.
 */
export function isLoopbackListen(listen: string): boolean {
  const host = listen
    .slice(0, listen.lastIndexOf(':'))
    .replace(/^\[|\]$/g, '')
    .toLowerCase();
  return host === 'localhost' || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host) || /^::ffff:127\./.test(host);
}

export interface HttpOptions {
  host?: string;
  /** 0 picks a free port (tests). */
  port?: number;
  /** The daemon loop is alive; defaults to "the process answers". */
  healthy?: () => boolean;
  readiness: () => Readiness;
  /** The Prometheus text and its content type, rendered per scrape. */
  metrics: () => { contentType: string; body: string } | Promise<{ contentType: string; body: string }>;
  logger?: Log;
}

export interface StatusServer {
  /** What was actually bound. */
  readonly address: { host: string; port: number };
  close(): Promise<void>;
}

interface Reply {
  status: number;
  type: string;
  body: string;
}

const text = (status: number, body: string): Reply => ({ status, type: 'text/plain; charset=utf-8', body });

async function route(pathname: string, opts: HttpOptions): Promise<Reply> {
  switch (pathname) {
    case '/healthz':
      return (opts.healthy?.() ?? true) ? text(200, 'ok\n') : text(503, 'daemon loop stalled\n');
    case '/readyz': {
      const r = opts.readiness();
      // Unauthenticated: the detail carries error text, so it is scrubbed like the log.
      return text(r.ready ? 200 : 503, r.detail.map((l) => scrub(l) + '\n').join('') || (r.ready ? 'ok\n' : 'not ready\n'));
    }
    case '/metrics': {
      const { contentType, body } = await opts.metrics();
      return { status: 200, type: contentType, body };
    }
    default:
      return text(404, 'not found\n');
  }
}

/** The path of a request target, or null when it is not a URL at all (`GET http://[`). */
export function requestPath(target: string | undefined): string | null {
  try {
    return new URL(target ?? '/', 'http://localhost').pathname;
  } catch {
    return null;
  }
}

async function handle(req: IncomingMessage, res: ServerResponse, opts: HttpOptions): Promise<void> {
  let reply: Reply;
  const pathname = requestPath(req.url);
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.writeHead(405, { allow: 'GET, HEAD' }).end();
    return;
  }
  if (pathname === null) {
    reply = text(400, 'bad request\n');
  } else {
    try {
      reply = await route(pathname, opts);
    } catch (err) {
      opts.logger?.error('status endpoint failed', { path: pathname, error: (err as Error).message });
      reply = text(500, 'internal error\n');
    }
  }
  res.writeHead(reply.status, { 'content-type': reply.type, 'cache-control': 'no-store' });
  res.end(req.method === 'HEAD' ? undefined : reply.body);
}

/** Open connections the status listener keeps; more are closed on arrival. */
export const MAX_CONNECTIONS = 64;

export async function startHttpServer(opts: HttpOptions): Promise<StatusServer> {
  const host = opts.host ?? DEFAULT_HTTP_HOST;
  const port = opts.port ?? DEFAULT_HTTP_PORT;
  // Bounded, so idle sockets a local user holds open cannot pile up against
  // the unit's MemoryMax: a few dozen scrapers and probes at most, and a
  // request that is not whole within seconds is dropped.
  const server = http.createServer({ headersTimeout: 5_000, requestTimeout: 10_000, keepAliveTimeout: 5_000 }, (req, res) => {
    // Last resort: whatever a request does, it must not take the daemon (and
    // with it the node's renewals) down; a local user can send anything here.
    handle(req, res, opts).catch((err: unknown) => {
      opts.logger?.error('status endpoint failed', { error: (err as Error).message });
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' });
      res.end();
    });
  });
  server.maxConnections = MAX_CONNECTIONS;
  // A client that resets mid-request must not surface as an unhandled error.
  server.on('clientError', (_err, socket) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
    else socket.destroy();
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', (err) =>
      reject(
        new KubebootError(`cannot listen on ${host}:${port} for /healthz, /readyz and /metrics: ${err.message}`, undefined, { cause: err }),
      ),
    );
    server.listen(port, host, () => resolve());
  });
  const addr = server.address() as AddressInfo;

  return {
    address: { host: addr.address, port: addr.port },
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        server.closeAllConnections();
      }),
  };
}

/** The status endpoints on `listen` (`host:port`, `[v6]:port`), said in the log once bound. */
export async function serveStatus(listen: string, opts: Omit<HttpOptions, 'host' | 'port'> & { logger: Log }): Promise<StatusServer> {
  const at = listen.lastIndexOf(':');
  const host = listen.slice(0, at).replace(/^\[|\]$/g, '');
  const server = await startHttpServer({ ...opts, host, port: Number(listen.slice(at + 1)) });
  opts.logger.info(`serving /healthz, /readyz and /metrics on ${server.address.host}:${server.address.port}`);
  return server;
}
