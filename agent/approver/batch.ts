/**
 * A batch: the CSRs a worker took off the queue at once, decided on one
 * view of the records (agent/records/, as the informers have them) as if
 * one after another. A CSR that spends a
 * record (a bootstrap token's first issue) is judged after the one before it
 * in the batch, on the records with that one's spend applied, so a pool's
 * CSRs spend its names exactly as they would one at a time; every other CSR
 * is judged beside them. What the batch spends is then written as one claim
 * per record, on the resourceVersion every decision read (or a name's claim
 * created); the records it read and did not write are looked at again and
 * must be unchanged. Only then is
 * any decision acted on: an approval never rests on a record older than that.
 *
 * Within a batch a Node is read once, and a SubjectAccessReview asked once
 * for the same user, uid, groups, extra and subresource: the batch is one
 * moment, as that many reviews asked at once would be.
 */
import type { RecordObject, RecordObjects, RecordResource } from '../records/kinds.js';
import type { Claim } from './api.js';
import type { ApproverCsr } from './csr-facts.js';
import { judge, prepare, spendsRecords, type Decision, type Prepared } from './decide.js';
import type { Lookups } from './lookups.js';
import type { ApproverPolicy } from './rules/rule.js';

/** One CSR's outcome: its decision, or the error that kept it from one (retried later, alone). */
export type Outcome = { csr: ApproverCsr; decision: Decision } | { csr: ApproverCsr; error: Error };

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

type Read = RecordObject | null;

const keyOf = (resource: RecordResource, name: string) => `${resource}/${name}`;

/** The record a claim leaves, applied to the record as the view has it. */
function applied(claim: Claim, before: Read): RecordObject {
  if (claim.op !== 'status') return claim.object;
  // A claim is made on a record the decision read, at the version read: anything else is a bug.
  if (before === null || before.metadata.resourceVersion !== claim.resourceVersion)
    throw new Error(`claim on ${claim.resource}/${claim.name} does not match the record read`);
  return { ...before, status: claim.status } as RecordObject;
}

/**
 * Two claims of one batch on one record, as one write: statuses and TPM
 * enrolments are written whole, so the later carries the earlier's (it was
 * decided on the view with it applied), on the version first read, or
 * created when the first one created it.
 */
function merged(before: Claim, claim: Claim, key: string): Claim {
  if (before.op === 'status' && claim.op === 'status') return { ...claim, resourceVersion: before.resourceVersion };
  if (before.resource === 'tpmenrolments' && claim.resource === 'tpmenrolments')
    return before.op === 'create'
      ? { op: 'create', resource: claim.resource, name: claim.name, object: claim.object }
      : { op: 'replace', resource: claim.resource, name: claim.name, resourceVersion: before.resourceVersion, object: claim.object };
  throw new Error(`two claims on ${key} in one batch`);
}

/**
 * The records as the batch's decisions see them: each read once (from the
 * informers), with the spends of the decisions before applied, and the
 * claims that write those spends, one per record.
 */
export class RecordView {
  readonly #read: (resource: RecordResource, name: string) => Promise<Read>;
  /** What was read, as read. */
  readonly #asRead = new Map<string, { resource: RecordResource; name: string; read: Promise<Read> }>();
  /** What was read, with the batch's spends applied. */
  readonly #current = new Map<string, Read>();
  readonly #claims = new Map<string, Claim>();

  constructor(read: (resource: RecordResource, name: string) => Promise<Read>) {
    this.#read = read;
  }

  async get<R extends RecordResource>(resource: R, name: string): Promise<RecordObjects[R] | null> {
    const key = keyOf(resource, name);
    if (this.#current.has(key)) return this.#current.get(key) as RecordObjects[R] | null;
    let entry = this.#asRead.get(key);
    if (entry === undefined) this.#asRead.set(key, (entry = { resource, name, read: this.#read(resource, name) }));
    const object = await entry.read;
    if (!this.#current.has(key)) this.#current.set(key, object);
    return this.#current.get(key) as RecordObjects[R] | null;
  }

  /** Applies an approval's claims to the view, and adds them to what the batch writes. */
  spend(claims: readonly Claim[]): void {
    for (const claim of claims) {
      const key = keyOf(claim.resource, claim.name);
      this.#current.set(key, applied(claim, this.#current.get(key) ?? null));
      const before = this.#claims.get(key);
      this.#claims.set(key, before === undefined ? claim : merged(before, claim, key));
    }
  }

  /** One claim per record spent on, in the order first spent (a binding before a name, a name before a mark, as one decision makes them). */
  claims(): Claim[] {
    return [...this.#claims.values()];
  }

  /**
   * Looks again at every record read and not claimed (a claim's own
   * precondition covers the others): the name of one that changed or
   * appeared or went since, or null when none did.
   */
  async changedSinceRead(): Promise<string | null> {
    for (const [key, { resource, name, read }] of this.#asRead) {
      if (this.#claims.has(key)) continue;
      const [was, now] = [await read, await this.#read(resource, name)];
      if (was === null && now === null) continue;
      if (was === null || now === null || was.metadata.resourceVersion !== now.metadata.resourceVersion) return key;
    }
    return null;
  }
}

/**
 * Decides every CSR of the batch on `view` (whose reads are `io.record`'s).
 * Spenders are judged in the order given, each after the one before; the
 * rest at once (`io` bounds the requests in flight).
 */
export async function decideBatch(csrs: readonly ApproverCsr[], policy: ApproverPolicy, io: Lookups, view: RecordView): Promise<Outcome[]> {
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
    record: (resource, name) => view.get(resource, name),
    legacy: (name) => io.legacy(name),
  };
  const prepared = await Promise.all(
    csrs.map(async (csr): Promise<Outcome | Prepared> => {
      try {
        const p = await prepare(csr, policy, io.request?.bind(io));
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
      if ('decision' in outcome && (outcome.decision.kind === 'approve' || outcome.decision.kind === 'challenge'))
        view.spend(outcome.decision.claims);
      outcomes.push(outcome);
    }
  })();
  const beside = Promise.all(others.map(async (p) => outcomes.push(await judged(p))));
  await Promise.all([inOrder, beside]);
  return outcomes;
}
