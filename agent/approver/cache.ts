/**
 * The informer's CSRs by name, indexed by requester and signer: the
 * one-unissued-per-node rule and the re-check of a node's other CSRs look
 * only at that node's, so a decision costs what one node has, not what the
 * cluster has (50,000 CSRs of one credential made a full pass quadratic).
 * It counts what it holds (`sizeOf` each CSR), so the informer can bound it.
 */
import type { ApproverCsr } from './csr-facts.js';

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
  #bytes = 0;

  constructor(sizeOf: (csr: ApproverCsr) => number = () => 0) {
    this.#sizeOf = sizeOf;
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

  /** Stores `csr` unless the cache already holds a newer version of the same object. */
  set(csr: ApproverCsr): void {
    const name = csr.metadata.name;
    const cached = this.get(name);
    if (cached !== undefined && isNewer(cached, csr)) return;
    if (cached !== undefined) this.#unindex(cached);
    const bytes = this.#sizeOf(csr);
    this.#bytes += bytes;
    this.#byName.set(name, { csr, bytes });
    const key = requesterKey(csr);
    let names = this.#byRequester.get(key);
    if (names === undefined) this.#byRequester.set(key, (names = new Set()));
    names.add(name);
  }

  delete(name: string): ApproverCsr | undefined {
    const cached = this.get(name);
    if (cached === undefined) return undefined;
    this.#unindex(cached);
    this.#byName.delete(name);
    return cached;
  }

  /** Every cached CSR of the same requester and signer as `csr`, itself included when cached. */
  sameRequester(csr: ApproverCsr): ApproverCsr[] {
    const names = this.#byRequester.get(requesterKey(csr)) ?? new Set<string>();
    return [...names].map((n) => this.get(n)!);
  }

  /** Takes `csr` (the cached one of its name) out of the index and the count. */
  #unindex(csr: ApproverCsr): void {
    this.#bytes -= this.#byName.get(csr.metadata.name)?.bytes ?? 0;
    const key = requesterKey(csr);
    const names = this.#byRequester.get(key);
    names?.delete(csr.metadata.name);
    if (names?.size === 0) this.#byRequester.delete(key);
  }
}
