/**
 * The CSR conversation with the API server: create (or adopt a compatible
 * one after 409), then wait for a decision with list+watch, re-listing on
 * every reconnect and falling back to polling when watching is refused.
 */
import { ApiError, CsrRejectedError, CsrUnusableError, KubebootError, TimedOutError, TransportError } from '../errors.js';
import type { Logger } from '../log.js';
import type { KubeClient } from './client.js';
import { csrState, pendingNotice, type CertificateSigningRequest } from './csr-state.js';
import { expectObject, objectPath } from './objects.js';
import { transientWaitMs } from './retry.js';
import { systemClock, type Clock } from '../time/clock.js';
import { abortAfter, every, pause } from '../time/timer.js';

const CSR_PATH = '/apis/certificates.k8s.io/v1/certificatesigningrequests';
/** How long one watch runs before the server ends it and we re-list. */
const WATCH_SECONDS = 60;
/** Silence beyond the watch's own end that means the connection is dead. */
const WATCH_SILENCE_SECONDS = 15;

export interface CsrRequest {
  name: string;
  requestPem: string;
  signerName: string;
  usages: string[];
  expirationSeconds: number | null;
}

/**
 * Returns why an existing CSR of the same name cannot be ours, or null when
 * it can (matches client-go ensureCompatible: same request key and subject,
 * same signer, and no certificate that has already expired).
 */
export type CompatibilityCheck = (existing: CertificateSigningRequest) => Promise<string | null>;

export async function createCsr(
  client: KubeClient,
  req: CsrRequest,
  isCompatible: CompatibilityCheck,
  signal?: AbortSignal,
): Promise<CertificateSigningRequest> {
  const body: CertificateSigningRequest = {
    apiVersion: 'certificates.k8s.io/v1',
    kind: 'CertificateSigningRequest',
    metadata: { name: req.name },
    spec: {
      request: Buffer.from(req.requestPem).toString('base64'),
      signerName: req.signerName,
      usages: req.usages,
      ...(req.expirationSeconds !== null ? { expirationSeconds: req.expirationSeconds } : {}),
    },
  };
  const created = await client.request('POST', CSR_PATH, { body, accept: [409], ...(signal ? { signal } : {}) });
  if (created.status !== 409) return expectObject<CertificateSigningRequest>(created.body, 'CertificateSigningRequest', req.name);
  const existing = await getCsr(client, req.name, signal);
  if (!existing) throw new KubebootError(`CSR ${req.name} already existed but vanished while it was read; retrying will create it again`);
  const problem = await isCompatible(existing);
  if (problem) throw new CsrUnusableError(`CSR ${req.name} already exists and is not compatible: ${problem}`);
  return existing;
}

export async function getCsr(client: KubeClient, name: string, signal?: AbortSignal): Promise<CertificateSigningRequest | null> {
  const res = await client.request('GET', objectPath(CSR_PATH, name), { accept: [404], ...(signal ? { signal } : {}) });
  return res.status === 404 ? null : expectObject<CertificateSigningRequest>(res.body, 'CertificateSigningRequest', name);
}

export interface WaitOptions {
  logger: Logger;
  /** Overall bound; exceeded → TimedOutError (exit 4). */
  timeoutMs: number;
  /** Log the approve command when pending this long, then once per this interval. */
  pendingNoticeMs: number;
  signal?: AbortSignal;
  /** Seconds between lists when the watch is refused. */
  pollIntervalMs?: number;
  /** Jitter of the retry back-off. */
  random?: () => number;
  /** The overall bound, the notices and every pause run on it. */
  clock?: Clock;
}

interface CsrList {
  metadata: { resourceVersion: string };
  items: CertificateSigningRequest[];
}

/** Waits until the CSR named `name` with `uid` is issued; returns the certificate PEM. */
export async function waitForCertificate(client: KubeClient, csr: CertificateSigningRequest, opts: WaitOptions): Promise<string> {
  const { name, uid } = csr.metadata;
  const signerName = csr.spec.signerName;
  const clock = opts.clock ?? systemClock;
  const started = clock.monotonic();
  const elapsedMs = (): number => clock.monotonic() - started;
  const timeout = abortAfter(opts.timeoutMs, clock);
  const signal = opts.signal ? AbortSignal.any([opts.signal, timeout.signal]) : timeout.signal;
  const random = opts.random ?? Math.random;
  const notice = every(opts.pendingNoticeMs, clock, () => {
    opts.logger.warn(pendingNotice(name, elapsedMs() / 1000, signerName), { csr: name });
  });

  const decide = (item: CertificateSigningRequest | undefined): string | null => {
    if (!item) throw new CsrUnusableError(`CSR ${name} was deleted while waiting for approval`);
    if (uid && item.metadata.uid && item.metadata.uid !== uid) {
      throw new CsrUnusableError(`CSR ${name} was replaced by another object (uid changed) while waiting for approval`);
    }
    const state = csrState(item);
    switch (state.state) {
      case 'issued':
        return state.certPem;
      case 'denied':
        throw new CsrRejectedError(`CSR ${name} was denied: ${state.reason}${state.message ? ` (${state.message})` : ''}`, {
          reason: state.reason,
          message: state.message,
        });
      case 'failed':
        throw new CsrRejectedError(`CSR ${name} failed: ${state.reason}${state.message ? ` (${state.message})` : ''}`);
      case 'pending':
        return null;
    }
  };

  let attempt = 0;
  let pollOnly = false;
  try {
    for (;;) {
      try {
        const list = await client.request<CsrList>('GET', CSR_PATH, { query: { fieldSelector: `metadata.name=${name}` }, signal });
        const issued = decide(list.body.items[0]);
        if (issued) return issued;
        if (pollOnly) {
          await pause(opts.pollIntervalMs ?? 5_000, clock, signal);
          continue;
        }
        const remainingSeconds = Math.max(1, Math.floor((opts.timeoutMs - elapsedMs()) / 1000));
        // A watch the server ends after a minute, and silence for 15 s past
        // that counts as a dead connection. Over HTTP/2 the client's PINGs
        // notice one sooner (client.ts PING_INTERVAL_MS, within 20 s); this
        // bound is what is left on HTTP/1.1.
        const timeoutSeconds = Math.min(WATCH_SECONDS, remainingSeconds);
        const events = client.watch<CertificateSigningRequest>(
          CSR_PATH,
          {
            fieldSelector: `metadata.name=${name}`,
            resourceVersion: list.body.metadata.resourceVersion,
            timeoutSeconds,
            allowWatchBookmarks: true,
          },
          signal,
          (timeoutSeconds + WATCH_SILENCE_SECONDS) * 1000,
        );
        for await (const event of events) {
          attempt = 0;
          if (event.type === 'BOOKMARK') continue;
          if (event.type === 'ERROR') break; // e.g. 410 Gone: re-list
          if (event.type === 'DELETED') decide(undefined);
          const done = decide(event.object);
          if (done) return done;
        }
        // The server ended the watch (timeoutSeconds): re-list and watch again.
      } catch (err) {
        if (signal.aborted) throw err;
        if (!(err instanceof ApiError) && !(err instanceof TransportError) && err instanceof KubebootError) throw err;
        if (err instanceof ApiError && (err.status === 403 || err.status === 405) && !pollOnly && err.phase === 'watch') {
          opts.logger.warn(`watching CSR ${name} is not permitted; polling instead`, { csr: name });
          pollOnly = true;
          continue;
        }
        if (err instanceof ApiError && !retryable(err.status)) throw err;
        const wait = transientWaitMs(err, attempt++, random, clock.now());
        opts.logger.warn(`waiting for CSR ${name}: ${(err as Error).message}; retrying in ${Math.round(wait / 1000)}s`, { csr: name });
        await pause(wait, clock, signal);
      }
    }
  } catch (err) {
    if (timeout.signal.aborted && !(opts.signal?.aborted ?? false)) {
      throw new TimedOutError(
        `timed out after ${Math.round(opts.timeoutMs / 1000)}s waiting for CSR ${name} to be approved and signed; approve it with: kubectl certificate approve ${name}`,
      );
    }
    throw err;
  } finally {
    timeout.cancel();
    notice.cancel();
  }
}

function retryable(status: number): boolean {
  return status === 429 || status >= 500 || status === 410;
}
