/**
 * The one request the resting daemon makes: GET kube-public/cluster-info
 * with Node's own https, authenticated with the kubelet's certificate and
 * verified against the CA the kubelet's kubeconfig names, as the CA keeper
 * reads it (trust/keeper.ts). One attempt, no retry: whatever goes wrong,
 * the caller starts a worker instead (daemon/ca-look.ts).
 */
import { request } from 'node:https';
import { clusterInfoDigest, type ClusterInfoObject } from '../kube/cluster-info-digest.js';
import { readOptional } from '../read-optional.js';
import type { CaLook } from '../trust/keeper.js';
import type { LookResult } from './ca-look.js';

type Tls = { ca: string; cert: string; key: string; servername: string | null };

/** cluster-info is a kubeconfig and a few signatures (kube/discovery.ts CLUSTER_INFO_MAX_BYTES). */
const MAX_BODY_BYTES = 1 << 20;

/** One GET; `signal` bounds it (the daemon's timeout, a nudge, SIGTERM). Never throws. */
export async function lookAtClusterInfo(look: CaLook, signal: AbortSignal): Promise<LookResult> {
  try {
    const [cert, key] = await Promise.all([readOptional(look.certFile), readOptional(look.keyFile)]);
    if (cert === null || key === null) return { kind: 'failed', why: `${look.certFile} does not exist` };
    const tls = { ca: look.caPem, cert, key, servername: look.tlsServerName };
    const body = await get(new URL(look.url), tls, signal);
    const cm = JSON.parse(body) as ClusterInfoObject & { kind?: unknown };
    if (typeof cm !== 'object' || cm === null || cm.kind !== 'ConfigMap') return { kind: 'failed', why: 'the answer is no ConfigMap' };
    const digest = clusterInfoDigest(cm);
    // A node with no Node object yet: a 404 is the answer expected, anything else (it appeared) wakes a worker.
    if (look.node !== undefined && (await get(new URL(look.node), tls, signal, [404])) !== null)
      return { kind: 'read', digest, nodeAppeared: true };
    return { kind: 'read', digest };
  } catch (err) {
    return { kind: 'failed', why: (err as Error).message };
  }
}

/** The body of a 200; null for a status in `absent`; any other status rejects. */
function get(url: URL, tls: Tls, signal: AbortSignal, absent: number[]): Promise<string | null>;
function get(url: URL, tls: Tls, signal: AbortSignal): Promise<string>;
function get(url: URL, tls: Tls, signal: AbortSignal, absent: number[] = []): Promise<string | null> {
  return new Promise((resolve, reject) => {
    const req = request(url, {
      method: 'GET',
      headers: { accept: 'application/json' },
      ca: tls.ca,
      cert: tls.cert,
      key: tls.key,
      ...(tls.servername ? { servername: tls.servername } : {}),
      rejectUnauthorized: true,
      // One connection per look, closed after it: nothing stays open while the daemon rests.
      agent: false,
      signal,
    });
    req.once('error', reject);
    req.once('response', (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        if (absent.includes(res.statusCode ?? 0)) return resolve(null);
        return reject(new Error(`HTTP ${res.statusCode}`));
      }
      const chunks: Buffer[] = [];
      let length = 0;
      res.on('data', (chunk: Buffer) => {
        length += chunk.length;
        if (length > MAX_BODY_BYTES) return req.destroy(new Error(`more than ${MAX_BODY_BYTES} bytes`));
        chunks.push(chunk);
      });
      res.once('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
      res.once('error', reject);
    });
    req.end();
  });
}
