// A minimal Kubernetes REST client for TEST code: JSON in, JSON out, TLS
// always verified against the given CA. The product has its own client; this
// one exists so the harness never depends on the code under test.
import { Agent, request } from 'undici';
import type { IncomingHttpHeaders } from 'node:http';

export interface KubeResponse<T> {
  status: number;
  body: T;
  headers: IncomingHttpHeaders;
}

export interface KubeClientOptions {
  server: string;
  caPem: string;
  /** Client certificate authentication. */
  certPem?: string;
  keyPem?: string;
  /** Bearer token authentication (bootstrap tokens). */
  token?: string;
}

export interface KubeClient {
  request<T = unknown>(method: string, path: string, body?: unknown): Promise<KubeResponse<T>>;
  close(): Promise<void>;
}

export function kubeClient(opts: KubeClientOptions): KubeClient {
  const agent = new Agent({
    connect: { ca: opts.caPem, cert: opts.certPem, key: opts.keyPem },
    headersTimeout: 60_000,
    bodyTimeout: 60_000,
  });
  return {
    async request<T>(method: string, path: string, body?: unknown): Promise<KubeResponse<T>> {
      const headers: Record<string, string> = { accept: 'application/json' };
      if (opts.token) headers.authorization = `Bearer ${opts.token}`;
      if (body !== undefined) headers['content-type'] = 'application/json';
      const res = await request(new URL(path, opts.server), {
        method: method as 'GET',
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        dispatcher: agent,
      });
      const text = await res.body.text();
      let parsed: unknown = text;
      try {
        parsed = text ? JSON.parse(text) : undefined;
      } catch {
        // Non-JSON bodies (/readyz says "ok") are returned as text.
      }
      return { status: res.statusCode, body: parsed as T, headers: res.headers };
    },
    close: () => agent.close(),
  };
}

/** Throws with the method, path, status and the API's message unless the status is expected. */
export function expectStatus<T>(res: KubeResponse<T>, what: string, ...ok: number[]): KubeResponse<T> {
  if (!ok.includes(res.status)) {
    const message = (res.body as { message?: string } | undefined)?.message ?? JSON.stringify(res.body);
    // Bounded: an echoed request can be megabytes.
    throw new Error(`${what}: HTTP ${res.status}: ${message.slice(0, 500)}`);
  }
  return res;
}
