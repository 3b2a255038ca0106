/**
 * A batch: the CSRs a worker took off the queue at once, decided on one
 * view of the records (the `kubeboot/<name>` ConfigMaps of
 * agent/kube/join-bindings.ts) as if one after another. A CSR that spends a
 * record (a bootstrap token's first issue) is judged after the one before it
 * in the batch, on the records with that one's spend applied, so a pool's
 * CSRs spend its names exactly as they would one at a time; every other CSR
 * is judged beside them. What the batch spends is then written as one claim
 * per record, on the resourceVersion every decision read; the records it
 * read and did not write are read again and must be unchanged. Only then is
 * any decision acted on: an approval never rests on a record older than that.
 *
 * Within a batch a Node is read once, and a SubjectAccessReview asked once
 * for the same user, uid, groups, extra and subresource: the batch is one
 * moment, as that many reviews asked at once would be.
 */
import type { Claim, NodeFacts, RecordConfigMap } from './api.js';
import type { ApiServerFacts } from './apiserver.js';
import type { ApproverCsr } from './csr-facts.js';
import { carrySpentBinding, judge, prepare, spendsRecords, type Decision, type Lookups, type Prepared } from './decide.js';
import type { ApproverPolicy } from './policy.js';
import type { RequestFacts } from './request.js';

/** The API calls a batch makes, each one request. */
export interface BatchIo {
  node(name: string): Promise<NodeFacts | null>;
  allowed(csr: ApproverCsr, subresource: string): Promise<boolean>;
  record(name: string): Promise<RecordConfigMap | null>;
  apiServer(): Promise<ApiServerFacts>;
  sameRequester(csr: ApproverCsr): Iterable<ApproverCsr>;
  /** The parsed spec.request (kept per CSR by the caller). */
  request(csr: ApproverCsr): Promise<RequestFacts | string>;
}

/** One CSR's outcome: its decision, or the error that kept it from one (retried later, alone). */
export type Outcome = { csr: ApproverCsr; decision: Decision } | { csr: ApproverCsr; error: Error };

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

function memo<T>(read: (key: string) => Promise<T>): (key: string) => Promise<T> {
  const seen = new Map<string, Promise<T>>();
  return (key) => {
    let p = seen.get(key);
    if (p === undefined) seen.set(key, (p = read(key)));
    return p;
  };
}

/** The review's subject as sarapprove.go sends it: the CSR's user, uid, groups and extra, and the subresource. */
export function reviewKey(csr: ApproverCsr, subresource: string): string {
  const extra = Object.entries(csr.spec.extra ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return JSON.stringify([csr.spec.username ?? '', csr.spec.uid ?? '', csr.spec.groups ?? [], extra, subresource]);
}

/**
 * The records as the batch's decisions see them: each read once, with the
 * spends of the decisions before applied, and the claims that write those
 * spends, one per record.
 */
export class RecordView {
  readonly #read: (name: string) => Promise<RecordConfigMap | null>;
  /** What was read, as read. */
  readonly #asRead = new Map<string, Promise<RecordConfigMap | null>>();
  /** What was read, with the batch's spends applied. */
  readonly #current = new Map<string, RecordConfigMap | null>();
  readonly #claims = new Map<string, Claim>();

  constructor(read: (name: string) => Promise<RecordConfigMap | null>) {
    this.#read = read;
  }

  async get(name: string): Promise<RecordConfigMap | null> {
    if (this.#current.has(name)) return this.#current.get(name)!;
    let read = this.#asRead.get(name);
    if (read === undefined) this.#asRead.set(name, (read = this.#read(name)));
    const cm = await read;
    if (!this.#current.has(name)) this.#current.set(name, cm);
    return this.#current.get(name)!;
  }

  /** Applies an approval's claims to the view, and adds them to what the batch writes. */
  spend(claims: readonly Claim[]): void {
    for (const claim of claims) {
      const cm = this.#current.get(claim.name);
      // A claim is made on a record the decision read, at the version read: anything else is a bug.
      if (cm == null || cm.metadata.resourceVersion !== claim.resourceVersion)
        throw new Error(`claim on ConfigMap ${claim.name} does not match the record read`);
      const after: RecordConfigMap = {
        ...cm,
        metadata: { ...cm.metadata, annotations: { ...cm.metadata.annotations, ...claim.patch.metadata?.annotations } },
        data: { ...cm.data, ...claim.patch.data },
      };
      carrySpentBinding(claim, after);
      this.#current.set(claim.name, after);
      const before = this.#claims.get(claim.name);
      const annotations = { ...before?.patch.metadata?.annotations, ...claim.patch.metadata?.annotations };
      const data = { ...before?.patch.data, ...claim.patch.data };
      this.#claims.set(claim.name, {
        name: claim.name,
        resourceVersion: claim.resourceVersion,
        patch: {
          ...(Object.keys(annotations).length > 0 ? { metadata: { annotations } } : {}),
          ...(Object.keys(data).length > 0 ? { data } : {}),
        },
      });
    }
  }

  /** One claim per record spent on, in the order first spent (the binding before the replacement mark, as one decision makes them). */
  claims(): Claim[] {
    return [...this.#claims.values()];
  }

  /**
   * Reads again every record read and not claimed (a claim's own
   * resourceVersion precondition covers the others): the name of one that
   * changed or appeared or went since, or null when none did.
   */
  async changedSinceRead(): Promise<string | null> {
    for (const [name, read] of this.#asRead) {
      if (this.#claims.has(name)) continue;
      const [was, now] = [await read, await this.#read(name)];
      if (was === null && now === null) continue;
      if (was === null || now === null || was.metadata.resourceVersion !== now.metadata.resourceVersion) return name;
    }
    return null;
  }
}

/**
 * Decides every CSR of the batch on `view` (whose reads are `io.record`'s).
 * Spenders are judged in the order given, each after the one before; the
 * rest at once (`io` bounds the requests in flight).
 */
export async function decideBatch(csrs: readonly ApproverCsr[], policy: ApproverPolicy, io: BatchIo, view: RecordView): Promise<Outcome[]> {
  const node = memo((name) => io.node(name));
  const reviews = new Map<string, Promise<boolean>>();
  const lookups: Lookups = {
    node,
    allowed: (csr, subresource) => {
      const key = reviewKey(csr, subresource);
      let p = reviews.get(key);
      if (p === undefined) reviews.set(key, (p = io.allowed(csr, subresource)));
      return p;
    },
    sameRequester: (csr) => io.sameRequester(csr),
    apiServer: () => io.apiServer(),
    record: (name) => view.get(name),
  };
  const prepared = await Promise.all(
    csrs.map(async (csr): Promise<Outcome | Prepared> => {
      try {
        const p = await prepare(csr, policy, io.request);
        return 'kind' in p ? { csr, decision: p } : p;
      } catch (err) {
        return { csr, error: err as Error };
      }
    }),
  );
  const outcomes: Outcome[] = prepared.filter((p): p is Outcome => 'decision' in p || 'error' in p);
  const ready = prepared.filter((p): p is Prepared => !('decision' in p || 'error' in p));
  const judged = async (p: Prepared): Promise<Outcome> => {
    try {
      return { csr: p.csr, decision: await judge(p, policy, lookups) };
    } catch (err) {
      return { csr: p.csr, error: err as Error };
    }
  };
  const spenders = ready.filter(spendsRecords);
  const others = ready.filter((p) => !spendsRecords(p));
  // The spenders' Nodes are read ahead, in parallel: judging them one after another then waits on nothing but the records.
  for (const p of spenders) if (p.readsNode && p.nodeName !== null) void node(p.nodeName).catch(() => {});
  const inOrder = (async () => {
    for (const p of spenders) {
      const outcome = await judged(p);
      if ('decision' in outcome && outcome.decision.kind === 'approve') view.spend(outcome.decision.claims);
      outcomes.push(outcome);
    }
  })();
  const beside = Promise.all(others.map(async (p) => outcomes.push(await judged(p))));
  await Promise.all([inOrder, beside]);
  return outcomes;
}
