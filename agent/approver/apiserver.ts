/**
 * The names and addresses that are the API server's: a kubelet serving
 * certificate carrying one of them, signed by a CA that clients of the API
 * server trust (kubeadm signs kubelet serving certificates with the cluster
 * CA), is an impostor API server for every pod, kubelet and admin. Read from
 * what clients verify (the SANs of the certificate the API server presents),
 * the `kubernetes` Service (its cluster IPs) and its Endpoints, and the URL
 * the approver itself connects to. Cached: they change when an admin
 * re-issues the API server's certificate or moves it, not per CSR.
 */
import { isIP } from 'node:net';
import { ApiError, KubebootError } from '../errors.js';
import { presentedChain, type KubeClient } from '../kube/client.js';
import { parseCertificateChain } from '../pki/certificate.js';
import { toPem } from '../pki/pem.js';
import type { Clock } from '../time/clock.js';

export interface ApiServerFacts {
  /** Lower-case DNS names. */
  names: string[];
  /** Canonical IP text. */
  ips: string[];
}

const KUBERNETES_SERVICE = '/api/v1/namespaces/default/services/kubernetes';
const KUBERNETES_ENDPOINTS = '/api/v1/namespaces/default/endpoints/kubernetes';
/** How long facts are reused; a failed read is retried on the next CSR. */
const TTL_MS = 60_000;

export async function readApiServerFacts(client: KubeClient, signal?: AbortSignal): Promise<ApiServerFacts> {
  const names = new Set<string>();
  const ips = new Set<string>();
  const host = new URL(client.endpoint.server).hostname.replace(/^\[|\]$/g, '');
  (isIP(host) ? ips : names).add(host.toLowerCase());
  const [leaf] = (await presentedChain(client.endpoint, { kind: 'anonymous' })).map(
    (der) => parseCertificateChain(toPem('CERTIFICATE', der))[0]!,
  );
  for (const d of leaf?.dnsNames ?? []) names.add(d.toLowerCase());
  for (const ip of leaf?.ipAddresses ?? []) ips.add(ip);
  const service = await optional<{ spec?: { clusterIP?: string; clusterIPs?: string[] } }>(client, KUBERNETES_SERVICE, signal);
  for (const ip of [service?.spec?.clusterIP, ...(service?.spec?.clusterIPs ?? [])]) if (ip && isIP(ip)) ips.add(ip);
  const endpoints = await optional<{ subsets?: { addresses?: { ip?: string }[] }[] }>(client, KUBERNETES_ENDPOINTS, signal);
  for (const subset of endpoints?.subsets ?? []) for (const a of subset.addresses ?? []) if (a.ip && isIP(a.ip)) ips.add(a.ip);
  return { names: [...names], ips: [...ips] };
}

/** The object, or null when it does not exist (an API server with its endpoint reconciler off keeps no Endpoints). */
async function optional<T>(client: KubeClient, path: string, signal?: AbortSignal): Promise<T | null> {
  try {
    const res = await client.request<T>('GET', path, { accept: [404], ...(signal ? { signal } : {}) });
    return res.status === 404 ? null : res.body;
  } catch (err) {
    if (err instanceof ApiError && err.status === 403)
      throw new KubebootError(
        `the approver may not read ${path} (apply packaging/manifests/approver/approver-rbac.yaml): without the API server's addresses no serving certificate is approved`,
      );
    throw err;
  }
}

/** The facts, read at most once per minute; concurrent CSRs share one read. */
export function cachedApiServerFacts(read: () => Promise<ApiServerFacts>, clock: Clock): () => Promise<ApiServerFacts> {
  let cached: { at: number; facts: Promise<ApiServerFacts> } | null = null;
  return () => {
    const now = clock.now().getTime();
    if (cached === null || now - cached.at >= TTL_MS) {
      const facts = read();
      cached = { at: now, facts };
      facts.catch(() => {
        if (cached?.facts === facts) cached = null;
      });
    }
    return cached.facts;
  };
}
