/**
 * What a decision looks up (decide.ts), as one interface: from the cluster
 * (`clusterLookups`: the API for Nodes and reviews, the informers' caches
 * for the records and the CSRs), or from values in tests. A batch (batch.ts)
 * wraps it so that each Node and each review is asked once and the records
 * are read through the batch's view.
 */
import type { KubeClient } from '../kube/client.js';
import type { Clock } from '../time/clock.js';
import { LEGACY_FOLLOWED, type LegacyFollowed, type RecordInformers } from '../records/informer.js';
import type { RecordObjects, RecordResource } from '../records/kinds.js';
import type { LegacyConfigMap } from '../records/legacy.js';
import { getNode, subjectAccessReview } from './api.js';
import type { ApiServerFacts } from './apiserver.js';
import type { ApproverCsr } from './csr-facts.js';
import type { ApproverMetrics } from './metrics.js';
import type { RequestFacts } from './request.js';
import type { World } from './rules/rule.js';

export interface Lookups {
  node(name: string): Promise<World['node']>;
  /** SubjectAccessReview as the CSR's requester for `create certificatesigningrequests/<subresource>`. */
  allowed(csr: ApproverCsr, subresource: string): Promise<boolean>;
  /** The CSRs the informer knows of the same requester and signer, for the one-unissued-per-node rule. */
  sameRequester(csr: ApproverCsr): Iterable<ApproverCsr>;
  /** The API server's names and addresses (apiserver.ts), for the serving and kubelet client rules. */
  apiServer(): Promise<ApiServerFacts>;
  /** A record of records/kinds.ts, or null when there is none. */
  record<R extends RecordResource>(resource: R, name: string): Promise<RecordObjects[R] | null>;
  /** A ConfigMap record of an earlier release still in `kubeboot` (records/legacy.ts), or null: only ever refused. */
  legacy(name: string): Promise<LegacyConfigMap | null>;
  /** The parsed spec.request, when the caller keeps it per CSR (absent: parsed for each decision). */
  request?(csr: ApproverCsr): Promise<RequestFacts | string>;
}

export interface ClusterLookupsOptions {
  client: KubeClient;
  records: Pick<RecordInformers, 'get' | 'legacy' | 'legacyBinding'>;
  sameRequester(csr: ApproverCsr): Iterable<ApproverCsr>;
  request(csr: ApproverCsr): Promise<RequestFacts | string>;
  apiServer(): Promise<ApiServerFacts>;
  /** Runs one API call within the requests in flight, timed by what it is. */
  timed<T>(call: string, request: () => Promise<T>): Promise<T>;
  signal(): AbortSignal | undefined;
}

/** The look-ups of a running approver: a GET or a review per call, the records from their informers. */
export function clusterLookups(o: ClusterLookupsOptions): Required<Lookups> {
  const { client, records, timed, signal } = o;
  return {
    node: (name) => timed('node', () => getNode(client, name, signal())),
    allowed: (csr, subresource) => timed('subjectaccessreview', () => subjectAccessReview(client, csr, subresource, signal())),
    record: async (resource, name) => records.get(resource, name),
    // The ConfigMaps of an earlier release the informers follow; a token's binding one is read when asked for.
    legacy: (name) =>
      (LEGACY_FOLLOWED as readonly string[]).includes(name)
        ? Promise.resolve(records.legacy(name as LegacyFollowed))
        : timed('record', () => records.legacyBinding(name, signal())),
    apiServer: o.apiServer,
    sameRequester: o.sameRequester,
    request: o.request,
  };
}

/** At most `n` of the calls given to it run at once. */
export function limiter(n: number): <T>(call: () => Promise<T>) => Promise<T> {
  let running = 0;
  const waiting: (() => void)[] = [];
  return async (call) => {
    if (running >= n) await new Promise<void>((resolve) => waiting.push(resolve));
    running++;
    try {
      return await call();
    } finally {
      running--;
      waiting.shift()?.();
    }
  };
}

/** Runs API calls at most `inFlight` at once, each timed into the request metric by what it is. */
export function timedCalls(
  inFlight: number,
  clock: Clock,
  metrics: Pick<ApproverMetrics, 'request'>,
): <T>(call: string, request: () => Promise<T>) => Promise<T> {
  const bound = limiter(inFlight);
  return (call, request) =>
    bound(async () => {
      const began = clock.monotonic();
      try {
        return await request();
      } finally {
        metrics.request(call, (clock.monotonic() - began) / 1000);
      }
    });
}
