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
import type { Clock } from '../time/clock.js';
import { nextDelay, type BackoffOptions } from '../time/backoff.js';
import { delay } from '../time/timer.js';

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

export interface Readiness {
  ready: boolean;
  /** One line per identity, e.g. "kubelet: valid until 2026-01-01T00:00:00Z". */
  detail: string[];
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
  /** A connection that has not sent a whole request header within this long is closed (tests shorten it). */
  headersTimeoutMs?: number;
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

/**
 * Open connections the status listener keeps; more are closed on arrival. A
 * local user who holds them all (reconnecting as each is closed) makes the
 * endpoints unavailable, nothing else: the listener is no part of the work,
 * of READY=1 or of the watchdog.
 */
export const MAX_CONNECTIONS = 64;
/** An idle connection (no whole request header) is closed after this long, a keep-alive one this long after its answer. */
export const HEADERS_TIMEOUT_MS = 5_000;

export async function startHttpServer(opts: HttpOptions): Promise<StatusServer> {
  const host = opts.host ?? DEFAULT_HTTP_HOST;
  const port = opts.port ?? DEFAULT_HTTP_PORT;
  // Bounded, so idle sockets a local user holds open cannot pile up against
  // the unit's MemoryMax: a few dozen scrapers and probes at most, and a
  // request that is not whole within seconds is dropped.
  // Node checks the header and request timeouts every connectionsCheckingInterval (30 s by default):
  // checked every second, a request trickled in byte by byte is cut within a second of its bound.
  const headersTimeout = opts.headersTimeoutMs ?? HEADERS_TIMEOUT_MS;
  const options = {
    headersTimeout,
    requestTimeout: 2 * headersTimeout,
    keepAliveTimeout: headersTimeout,
    connectionsCheckingInterval: 1_000,
  };
  const server = http.createServer(options, (req, res) => {
    // Last resort: whatever a request does, it must not take the daemon (and
    // with it the node's renewals) down; a local user can send anything here.
    handle(req, res, opts).catch((err: unknown) => {
      opts.logger?.error('status endpoint failed', { error: (err as Error).message });
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' });
      res.end();
    });
  });
  server.maxConnections = MAX_CONNECTIONS;
  // Node's header and request timeouts start at a request's first byte: a connection that sends nothing
  // would be held for ever. Idle this long, a socket is destroyed (no 'timeout' listener: Node's default).
  server.setTimeout(headersTimeout);
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

/** The status endpoints on `listen` (`host:port`, `[v6]:port`). */
export async function serveStatus(listen: string, opts: Omit<HttpOptions, 'host' | 'port'>): Promise<StatusServer> {
  const at = listen.lastIndexOf(':');
  const host = listen.slice(0, at).replace(/^\[|\]$/g, '');
  return startHttpServer({ ...opts, host, port: Number(listen.slice(at + 1)) });
}

/**
 * Between attempts to bind the status listener: 1 s, doubling, at most a
 * minute. A port held by someone else (a local user while kubeboot was down)
 * is retried for as long as it takes; the endpoints come once it is free.
 */
export const LISTEN_BACKOFF: Readonly<BackoffOptions> = { initial: 1_000, factor: 2, cap: 60_000, jitter: 0.1 };

export interface StatusListenerOptions extends Omit<HttpOptions, 'host' | 'port' | 'logger'> {
  logger: Log;
  clock: Clock;
  random?: () => number;
  /** Each failed attempt (a metric counts them). */
  onFailure?: () => void;
  /** After each attempt: the problem while not bound, null once bound (STATUS=, status.json). */
  onChange?: (problem: string | null) => void;
}

/**
 * The status listener as something the process may have or not: an attempt
 * that fails is logged (the first at warning, the rest at debug), counted and
 * reported, and `retryAt` says when the owner's loop should try again. The
 * listener is never a start condition: not of the work, nor of READY=1.
 */
export class StatusListener {
  readonly #listen: string;
  readonly #o: StatusListenerOptions;
  #server: StatusServer | null = null;
  #failures = 0;
  #retryAt: number | null = null;
  #closed = false;

  constructor(listen: string, options: StatusListenerOptions) {
    this.#listen = listen;
    this.#o = options;
  }

  get server(): StatusServer | null {
    return this.#server;
  }

  /** Monotonic ms of the next attempt; null while bound (or closed). */
  get retryAt(): number | null {
    return this.#server !== null || this.#closed ? null : this.#retryAt;
  }

  /** Binds now; true once bound. Never throws. */
  async attempt(): Promise<boolean> {
    if (this.#server !== null || this.#closed) return this.#server !== null;
    const { logger, clock } = this.#o;
    try {
      const server = await serveStatus(this.#listen, this.#o);
      if (this.#closed) {
        await server.close();
        return false;
      }
      this.#server = server;
      const after = this.#failures > 0 ? ` (after ${this.#failures} failed attempt(s))` : '';
      logger.info(`serving /healthz, /readyz and /metrics on ${server.address.host}:${server.address.port}${after}`);
      this.#o.onChange?.(null);
      return true;
    } catch (err) {
      const waitMs = nextDelay(this.#failures, LISTEN_BACKOFF, this.#o.random);
      this.#failures += 1;
      this.#retryAt = clock.monotonic() + waitMs;
      const problem = (err as Error).message;
      const line = `${problem}; working on without them, trying again in ${Math.round(waitMs / 1000)}s (then at most every ${LISTEN_BACKOFF.cap / 1000}s)`;
      if (this.#failures === 1) logger.warn(line);
      else logger.debug(line);
      this.#o.onFailure?.();
      this.#o.onChange?.(`${problem} (attempt ${this.#failures})`);
      return false;
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    await this.#server?.close();
    this.#server = null;
  }
}

/**
 * The approver's listener loop (its own, as the node daemon's loop owns its
 * listener): tries until bound or `signal` aborts. Resolves in either case.
 */
export async function keepListening(listener: StatusListener, clock: Clock, signal: AbortSignal): Promise<void> {
  while (!signal.aborted && !(await listener.attempt())) {
    const at = listener.retryAt;
    if (at === null) return;
    try {
      await delay(Math.max(0, at - clock.monotonic()), clock, { signal });
    } catch {
      return;
    }
  }
}
