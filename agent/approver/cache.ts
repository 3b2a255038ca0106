/**
 * The informer's CSRs by name, indexed by requester and signer: the
 * one-unissued-per-node rule and the re-check of a node's other CSRs look
 * only at that node's, so a decision costs what one node has, not what the
 * cluster has (50,000 CSRs of one credential made a full pass quadratic).
 * It counts what it holds (`sizeOf` each CSR), so the informer can bound it,
 * and bounds what each requester's pending CSRs of ours take (`maxPendingPerRequester`
 * bytes, spec.username): one token or one node fills its own share, never
 * what everyone shares. Past its share a requester's youngest pending CSRs
 * (creationTimestamp, then name) are not kept, only counted (by uid, server
 * chosen), so they are left undecided until room is made and a re-list
 * brings them back (informer.ts).
 */
import { isOlder, isSettled, type ApproverCsr } from './csr-facts.js';

/** Uids of a requester's CSRs left out that are remembered (to count each once, and know when they went); past it they are not counted. */
export const MAX_OVERFLOW_TRACKED = 10_000;

/** What set() did: whether it kept the CSR, and which younger ones of its requester it left out to make room. */
export interface Admission {
  kept: boolean;
  evicted: ApproverCsr[];
}

const requesterOf = (csr: ApproverCsr): string => csr.spec.username ?? '';
const idOf = (csr: ApproverCsr): string => csr.metadata.uid ?? csr.metadata.name;
/** Pending and ours: what takes its requester's share (another signer's, settled ones are small stubs, bounded in all). */
const takesShare = (csr: ApproverCsr): boolean => !isSettled(csr) && csr.notOurs !== true;

const requesterKey = (csr: ApproverCsr): string => JSON.stringify([csr.spec.username ?? '', csr.spec.signerName]);

/** Same object (uid) at a later resourceVersion: a snapshot older than what is cached must not replace it. */
export function isNewer(a: ApproverCsr, b: ApproverCsr): boolean {
  if (a.metadata.uid === undefined || a.metadata.uid !== b.metadata.uid) return false;
  return Number(a.metadata.resourceVersion) > Number(b.metadata.resourceVersion);
}

export class CsrCache {
  readonly #byName = new Map<string, { csr: ApproverCsr; bytes: number }>();
  readonly #byRequester = new Map<string, Set<string>>();
  readonly #sizeOf: (csr: ApproverCsr) => number;
  readonly #maxPending: number;
  /** Requester → the bytes and names of its kept pending CSRs. */
  readonly #pending = new Map<string, { bytes: number; names: Set<string> }>();
  /** Requester → uids of its pending CSRs left out (not kept). */
  readonly #overflow = new Map<string, Set<string>>();
  #bytes = 0;

  constructor(sizeOf: (csr: ApproverCsr) => number = () => 0, maxPendingPerRequester = Number.POSITIVE_INFINITY) {
    this.#sizeOf = sizeOf;
    this.#maxPending = maxPendingPerRequester;
  }

  get size(): number {
    return this.#byName.size;
  }

  /** The sum of `sizeOf` over what it holds. */
  get bytes(): number {
    return this.#bytes;
  }

  get(name: string): ApproverCsr | undefined {
    return this.#byName.get(name)?.csr;
  }

  keys(): IterableIterator<string> {
    return this.#byName.keys();
  }

  *values(): IterableIterator<ApproverCsr> {
    for (const entry of this.#byName.values()) yield entry.csr;
  }

  /**
   * Stores `csr` unless the cache already holds a newer version of the same
   * object, or it is pending and its requester's share is full: then the
   * youngest of that requester's kept pending CSRs make room for an older
   * one (and are left out), or `csr` itself is left out.
   */
  set(csr: ApproverCsr): Admission {
    const name = csr.metadata.name;
    const cached = this.get(name);
    if (cached !== undefined && isNewer(cached, csr)) return { kept: true, evicted: [] };
    if (cached !== undefined) this.#remove(cached);
    const bytes = this.#sizeOf(csr);
    const evicted: ApproverCsr[] = [];
    if (takesShare(csr)) {
      const requester = requesterOf(csr);
      while (bytes > this.#maxPending - this.pendingBytes(requester)) {
        const youngest = this.#youngestPending(requester);
        if (youngest === undefined || !isOlder(csr, youngest)) {
          this.#leaveOut(csr);
          return { kept: false, evicted: cached === undefined ? evicted : [cached, ...evicted] };
        }
        this.#remove(youngest);
        this.#leaveOut(youngest);
        evicted.push(youngest);
      }
    }
    this.#forgetLeftOut(csr);
    this.#bytes += bytes;
    this.#byName.set(name, { csr, bytes });
    const key = requesterKey(csr);
    let names = this.#byRequester.get(key);
    if (names === undefined) this.#byRequester.set(key, (names = new Set()));
    names.add(name);
    if (takesShare(csr)) {
      const requester = requesterOf(csr);
      let pending = this.#pending.get(requester);
      if (pending === undefined) this.#pending.set(requester, (pending = { bytes: 0, names: new Set() }));
      pending.bytes += bytes;
      pending.names.add(name);
    }
    return { kept: true, evicted };
  }

  delete(name: string): ApproverCsr | undefined {
    const cached = this.get(name);
    if (cached === undefined) return undefined;
    this.#remove(cached);
    return cached;
  }

  /** A CSR that is gone (deleted) or settled is no longer left out. */
  forgetLeftOut(csr: ApproverCsr): void {
    this.#forgetLeftOut(csr);
  }

  /** Bytes (sizeOf) of `requester`'s kept pending CSRs. */
  pendingBytes(requester: string): number {
    return this.#pending.get(requester)?.bytes ?? 0;
  }

  /** How many of `requester`'s pending CSRs are left out (up to MAX_OVERFLOW_TRACKED). */
  leftOut(requester: string): number {
    return this.#overflow.get(requester)?.size ?? 0;
  }

  /** Requesters with CSRs left out, and how many CSRs in all. */
  get overflow(): { requesters: number; csrs: number } {
    let csrs = 0;
    for (const ids of this.#overflow.values()) csrs += ids.size;
    return { requesters: this.#overflow.size, csrs };
  }

  /** After a list: forgets CSRs left out that the list no longer has (`seen` holds the uids it had). */
  keepLeftOutOnly(seen: ReadonlySet<string>): void {
    for (const [requester, ids] of this.#overflow) {
      for (const id of ids) if (!seen.has(id)) ids.delete(id);
      if (ids.size === 0) this.#overflow.delete(requester);
    }
  }

  /** Whether a set() of `csr` added it to the left out (so it is counted once). */
  isLeftOut(csr: ApproverCsr): boolean {
    return this.#overflow.get(requesterOf(csr))?.has(idOf(csr)) === true;
  }

  #leaveOut(csr: ApproverCsr): void {
    const requester = requesterOf(csr);
    let ids = this.#overflow.get(requester);
    if (ids === undefined) this.#overflow.set(requester, (ids = new Set()));
    if (ids.size < MAX_OVERFLOW_TRACKED) ids.add(idOf(csr));
  }

  #forgetLeftOut(csr: ApproverCsr): void {
    const requester = requesterOf(csr);
    const ids = this.#overflow.get(requester);
    ids?.delete(idOf(csr));
    if (ids?.size === 0) this.#overflow.delete(requester);
  }

  /** The youngest kept pending CSR of `requester` (creationTimestamp, then name). */
  #youngestPending(requester: string): ApproverCsr | undefined {
    let youngest: ApproverCsr | undefined;
    for (const name of this.#pending.get(requester)?.names ?? []) {
      const csr = this.get(name)!;
      if (youngest === undefined || isOlder(youngest, csr)) youngest = csr;
    }
    return youngest;
  }

  /** Every cached CSR of the same requester and signer as `csr`, itself included when cached. */
  sameRequester(csr: ApproverCsr): ApproverCsr[] {
    const names = this.#byRequester.get(requesterKey(csr)) ?? new Set<string>();
    return [...names].map((n) => this.get(n)!);
  }

  /** Takes `csr` (the cached one of its name) out of the cache, the indexes and the counts. */
  #remove(csr: ApproverCsr): void {
    const name = csr.metadata.name;
    const bytes = this.#byName.get(name)?.bytes ?? 0;
    this.#bytes -= bytes;
    this.#byName.delete(name);
    const key = requesterKey(csr);
    const names = this.#byRequester.get(key);
    names?.delete(name);
    if (names?.size === 0) this.#byRequester.delete(key);
    const pending = this.#pending.get(requesterOf(csr));
    if (pending?.names.delete(name)) {
      pending.bytes -= bytes;
      if (pending.names.size === 0) this.#pending.delete(requesterOf(csr));
    }
  }
}
