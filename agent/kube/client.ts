/**
 * A small Kubernetes REST client over undici: one Agent per (endpoint,
 * credential), JSON in and out, Status errors mapped to ApiError, and
 * newline-delimited watch streams. Tokens travel only in the Authorization
 * header and never appear in errors.
 */
import { readFileSync } from 'node:fs';
import { connect as tlsConnect, type PeerCertificate } from 'node:tls';
import type { Dispatcher } from 'undici';
import { ApiError, KubebootError, ResponseTooLargeError, TransportError, type RequestPhase } from '../errors.js';
import { bounded } from '../text.js';
import { systemClock } from '../time/clock.js';
import { Agent, requestOn } from './undici-core.js';
import { WatchLines } from './watch-lines.js';

export interface Endpoint {
  server: string;
  /** PEM bundle the server must chain to; null means the system roots. */
  caPem: string | null;
  tlsServerName?: string | null;
  /** Only ever set behind an explicit unsafe option. */
  unsafeSkipTlsVerify?: boolean;
}

export type ClientAuth =
  | { kind: 'token'; token: string }
  /** Re-read at most once a minute (matches client-go's cached file token source): projected service-account tokens rotate. */
  | { kind: 'token-file'; path: string }
  | { kind: 'client-certificate'; certPem: string; keyPem: string }
  | { kind: 'anonymous' };

export interface ApiResponse<T> {
  status: number;
  body: T;
  headers: Record<string, string | string[] | undefined>;
}

export interface RequestOptions {
  body?: unknown;
  query?: Record<string, string | number | boolean | undefined>;
  signal?: AbortSignal;
  /** Milliseconds to wait for response headers. */
  timeoutMs?: number;
  /** Statuses returned as a response instead of thrown (e.g. 404, 409). */
  accept?: number[];
  /** Largest response body read; defaults to MAX_BODY_BYTES. */
  maxBodyBytes?: number;
  /** Content type of the body; application/json unless a patch says otherwise. */
  contentType?: string;
}

/**
 * Every object kubeboot reads (a CSR with its certificate, a Status, a
 * SelfSubjectReview, cluster-info) is kilobytes; the API server's own request
 * limit is 3 MiB. A server that sends more is refused, not buffered (a
 * 200 MiB body took the daemon to 427 MiB, on every retry).
 */
export const MAX_BODY_BYTES = 4 << 20;
/**
 * The most one object can take as JSON: the API server stores objects of up
 * to 3 MiB, and JSON escapes a byte as up to six (`\u003c`), so a 1.4 MB CSR
 * of `<` comes back as 8 MiB. A bound for one object at a time (a watch
 * event, a list page of one), never for a whole list.
 */
export const MAX_OBJECT_BYTES = 24 << 20;
/** One watch event is one object. */
export const MAX_WATCH_LINE_BYTES = MAX_OBJECT_BYTES;

/** The body as text, refusing one longer than `max` bytes as soon as it is. */
async function readBounded(
  body: Dispatcher.ResponseData['body'],
  headers: Dispatcher.ResponseData['headers'],
  max: number,
  what: string,
): Promise<string> {
  const declared = Number(headers['content-length']);
  if (Number.isFinite(declared) && declared > max) {
    body.destroy();
    throw new ResponseTooLargeError(`${what}: response body is ${declared} bytes; at most ${max} are read`);
  }
  const chunks: Buffer[] = [];
  let length = 0;
  for await (const chunk of body) {
    length += (chunk as Buffer).length;
    if (length > max) {
      body.destroy();
      throw new ResponseTooLargeError(`${what}: response body exceeds ${max} bytes; refusing it`);
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

const USER_AGENT = 'kubeboot';

export class KubeClient {
  readonly endpoint: Endpoint;
  readonly #credential: ClientAuth;
  readonly #dispatcher: Dispatcher;
  /** An injected dispatcher (a test's MockAgent) is shared, so only one made here is closed here. */
  readonly #ownsDispatcher: boolean;
  readonly #base: URL;

  constructor(endpoint: Endpoint, credential: ClientAuth, dispatcher?: Dispatcher) {
    this.endpoint = endpoint;
    this.#credential = credential;
    this.#base = new URL(endpoint.server.endsWith('/') ? endpoint.server : endpoint.server + '/');
    this.#dispatcher = dispatcher ?? agentFor(endpoint, credential);
    this.#ownsDispatcher = dispatcher === undefined;
  }

  get identityHint(): string {
    return this.#credential.kind;
  }

  url(path: string, query?: RequestOptions['query']): URL {
    const url = new URL(path.replace(/^\//, ''), this.#base);
    for (const [key, value] of Object.entries(query ?? {})) {
      if (value !== undefined) url.searchParams.set(key, String(value));
    }
    return url;
  }

  #headers(json: boolean, contentType = 'application/json'): Record<string, string> {
    const headers: Record<string, string> = { accept: 'application/json', 'user-agent': USER_AGENT };
    if (json) headers['content-type'] = contentType;
    if (this.#credential.kind === 'token') headers.authorization = `Bearer ${this.#credential.token}`;
    if (this.#credential.kind === 'token-file') headers.authorization = `Bearer ${this.#fileToken(this.#credential.path)}`;
    return headers;
  }

  #tokenCache: { token: string; readAt: number } | null = null;
  #fileToken(file: string): string {
    if (this.#tokenCache === null || systemClock.monotonic() - this.#tokenCache.readAt > 60_000) {
      let token: string;
      try {
        token = readFileSync(file, 'utf8').trim();
      } catch (err) {
        // Keep the last token through a momentary gap while the kubelet swaps the file.
        if (this.#tokenCache !== null) return this.#tokenCache.token;
        throw new KubebootError(
          `cannot read token file ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
          undefined,
          { cause: err },
        );
      }
      this.#tokenCache = { token, readAt: systemClock.monotonic() };
    }
    return this.#tokenCache.token;
  }

  async request<T = unknown>(method: string, path: string, options: RequestOptions = {}): Promise<ApiResponse<T>> {
    const url = this.url(path, options.query);
    const hasBody = options.body !== undefined;
    let res: Dispatcher.ResponseData;
    try {
      res = await requestOn(this.#dispatcher, {
        ...target(url),
        method: method as Dispatcher.HttpMethod,
        headers: this.#headers(hasBody, options.contentType),
        body: hasBody ? JSON.stringify(options.body) : null,
        signal: options.signal ?? null,
        headersTimeout: options.timeoutMs ?? 30_000,
        bodyTimeout: options.timeoutMs ?? 30_000,
      });
    } catch (err) {
      throw transportError(method, url, err);
    }
    const text = await readBounded(res.body, res.headers, options.maxBodyBytes ?? MAX_BODY_BYTES, `${method} ${url.pathname}`).catch(
      (err: unknown) => {
        if (err instanceof KubebootError) throw err;
        throw transportError(method, url, err);
      },
    );
    const body = parseJson(text);
    const headers = res.headers as ApiResponse<T>['headers'];
    if ((res.statusCode >= 200 && res.statusCode < 300) || options.accept?.includes(res.statusCode)) {
      return { status: res.statusCode, body: body as T, headers };
    }
    throw apiError(method, url.pathname, res.statusCode, body, headers, 'request');
  }

  /**
   * Streams watch events until the server ends the watch, the signal aborts,
   * or the connection fails (which throws). Matches the API's watch framing:
   * one JSON object per line.
   */
  async *watch<T = unknown>(
    path: string,
    query: RequestOptions['query'],
    signal: AbortSignal,
    idleTimeoutMs = 0,
  ): AsyncGenerator<WatchEvent<T>> {
    const url = this.url(path, { ...query, watch: true });
    let res: Dispatcher.ResponseData;
    try {
      res = await requestOn(this.#dispatcher, {
        ...target(url),
        method: 'GET',
        headers: this.#headers(false),
        signal,
        headersTimeout: 30_000,
        // The server closes the watch after timeoutSeconds; silence longer
        // than idleTimeoutMs (0: none) means the connection died unnoticed.
        bodyTimeout: idleTimeoutMs,
      });
    } catch (err) {
      throw transportError('GET', url, err);
    }
    if (res.statusCode !== 200) {
      const body = parseJson(await readBounded(res.body, res.headers, MAX_BODY_BYTES, `WATCH ${url.pathname}`));
      throw apiError('GET', url.pathname, res.statusCode, body, res.headers as ApiResponse<T>['headers'], 'watch');
    }
    const lines = new WatchLines(
      MAX_WATCH_LINE_BYTES,
      () => new ResponseTooLargeError(`WATCH ${url.pathname}: an event line exceeds ${MAX_WATCH_LINE_BYTES} bytes; refusing it`),
    );
    try {
      for await (const chunk of res.body) for (const line of lines.push(chunk as Buffer)) yield JSON.parse(line) as WatchEvent<T>;
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof KubebootError) throw err;
      throw transportError('WATCH', url, err);
    } finally {
      res.body.destroy();
    }
  }

  async close(): Promise<void> {
    if (this.#ownsDispatcher) await this.#dispatcher.close();
  }
}

export interface WatchEvent<T> {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: T;
}

/**
 * HTTP/2 PING period. kube-apiserver negotiates HTTP/2 (undici offers it by
 * ALPN), and undici closes a session whose PING is still unanswered when the
 * next is due, failing its streams: a connection that went silent without
 * closing (a dead peer, a NAT or load balancer that dropped it) is noticed
 * 10–20 s after its last answer, on a watch as on any request. client-go gets
 * the same from its HTTP/2 health check (ReadIdleTimeout 30 s, PingTimeout
 * 15 s). Without it the node noticed only when the watch's own idle bound ran
 * out (~88 s). TCP keep-alive is no substitute: a silent proxy still ACKs
 * its probes, and Node sets only the first delay (the kernel's retries take minutes).
 */
export const PING_INTERVAL_MS = 10_000;

export function agentFor(endpoint: Endpoint, credential: ClientAuth): Agent {
  const clientCert = credential.kind === 'client-certificate' ? { cert: credential.certPem, key: credential.keyPem } : {};
  return new Agent({
    allowH2: true,
    h2Options: { pingInterval: PING_INTERVAL_MS },
    connect: {
      ...(endpoint.caPem ? { ca: endpoint.caPem } : {}),
      ...(endpoint.tlsServerName ? { servername: endpoint.tlsServerName } : {}),
      ...clientCert,
      rejectUnauthorized: endpoint.unsafeSkipTlsVerify !== true,
      timeout: 15_000,
    },
    keepAliveTimeout: 30_000,
  });
}

/** Where a request goes, as a dispatcher takes it. */
function target(url: URL): { origin: string; path: string } {
  return { origin: url.origin, path: `${url.pathname}${url.search}` };
}

function parseJson(text: string): unknown {
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function apiError(
  method: string,
  path: string,
  status: number,
  body: unknown,
  headers: Record<string, string | string[] | undefined>,
  phase: RequestPhase,
): ApiError {
  const statusObj = (typeof body === 'object' && body !== null ? body : {}) as { reason?: string; message?: string };
  const reason = bounded(String(statusObj.reason ?? ''), 64) || (status === 401 ? 'Unauthorized' : status === 403 ? 'Forbidden' : 'Error');
  // The server's words, bounded: an error message is for one line.
  const message = bounded(typeof statusObj.message === 'string' ? statusObj.message : typeof body === 'string' ? body : '', 1024);
  const retryAfter = headers['retry-after'];
  return new ApiError({ method, path, status, reason, message, retryAfter: Array.isArray(retryAfter) ? retryAfter[0] : retryAfter, phase });
}

function transportError(method: string, url: URL, err: unknown): KubebootError {
  if (err instanceof Error && err.name === 'AbortError')
    return new KubebootError(`${method} ${url.pathname}: aborted`, undefined, { cause: err });
  const cause = err as { code?: string; message?: string; cause?: { code?: string; message?: string } };
  const code = cause.code ?? cause.cause?.code;
  const detail = cause.cause?.message ?? cause.message ?? String(err);
  return new TransportError(`${method} ${url.origin}${url.pathname}: ${code ? code + ': ' : ''}${detail}`, undefined, { cause: err });
}

/**
 * The certificates the API server presents (leaf first, as DER) on a TLS
 * connection verified against the endpoint's CA bundle and carrying the
 * client certificate, as every request of that client would. Only the
 * handshake: no request is sent.
 */
export async function presentedChain(endpoint: Endpoint, credential: ClientAuth, timeoutMs = 15_000): Promise<Uint8Array[]> {
  const url = new URL(endpoint.server);
  const clientCert = credential.kind === 'client-certificate' ? { cert: credential.certPem, key: credential.keyPem } : {};
  return new Promise((resolve, reject) => {
    const socket = tlsConnect({
      host: url.hostname.replace(/^\[|\]$/g, ''),
      port: Number(url.port || 443),
      ...(endpoint.caPem ? { ca: endpoint.caPem } : {}),
      servername: endpoint.tlsServerName ?? (/^[\d.]+$|:/.test(url.hostname) ? undefined : url.hostname),
      ...clientCert,
      rejectUnauthorized: endpoint.unsafeSkipTlsVerify !== true,
      ALPNProtocols: ['http/1.1'],
      timeout: timeoutMs,
    });
    socket.once('secureConnect', () => {
      const chain: Uint8Array[] = [];
      let cert: PeerCertificate | undefined = socket.getPeerCertificate(true);
      while (cert?.raw && !chain.some((c) => Buffer.compare(c, cert!.raw) === 0)) {
        chain.push(new Uint8Array(cert.raw));
        cert = (cert as PeerCertificate & { issuerCertificate?: PeerCertificate }).issuerCertificate;
      }
      socket.destroy();
      resolve(chain);
    });
    socket.once('timeout', () => socket.destroy(new Error('TLS handshake timed out')));
    socket.once('error', (err) => reject(transportError('TLS', url, err)));
  });
}
