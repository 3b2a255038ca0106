/**
 * The informer's CSRs by name, indexed by requester and signer: the
 * one-unissued-per-node rule and the re-check of a node's other CSRs look
 * only at that node's, so a decision costs what one node has, not what the
 * cluster has (50,000 CSRs of one credential made a full pass quadratic).
 */
import type { ApproverCsr } from './csr-facts.js';

const requesterKey = (csr: ApproverCsr): string => JSON.stringify([csr.spec.username ?? '', csr.spec.signerName]);

/** Same object (uid) at a later resourceVersion: a snapshot older than what is cached must not replace it. */
export function isNewer(a: ApproverCsr, b: ApproverCsr): boolean {
  if (a.metadata.uid === undefined || a.metadata.uid !== b.metadata.uid) return false;
  return Number(a.metadata.resourceVersion) > Number(b.metadata.resourceVersion);
}

export class CsrCache {
  readonly #byName = new Map<string, ApproverCsr>();
  readonly #byRequester = new Map<string, Set<string>>();

  get size(): number {
    return this.#byName.size;
  }

  get(name: string): ApproverCsr | undefined {
    return this.#byName.get(name);
  }

  keys(): IterableIterator<string> {
    return this.#byName.keys();
  }

  values(): IterableIterator<ApproverCsr> {
    return this.#byName.values();
  }

  /** Stores `csr` unless the cache already holds a newer version of the same object. */
  set(csr: ApproverCsr): void {
    const name = csr.metadata.name;
    const cached = this.#byName.get(name);
    if (cached !== undefined && isNewer(cached, csr)) return;
    if (cached !== undefined) this.#unindex(cached);
    this.#byName.set(name, csr);
    const key = requesterKey(csr);
    let names = this.#byRequester.get(key);
    if (names === undefined) this.#byRequester.set(key, (names = new Set()));
    names.add(name);
  }

  delete(name: string): ApproverCsr | undefined {
    const cached = this.#byName.get(name);
    if (cached === undefined) return undefined;
    this.#byName.delete(name);
    this.#unindex(cached);
    return cached;
  }

  /** Every cached CSR of the same requester and signer as `csr`, itself included when cached. */
  sameRequester(csr: ApproverCsr): ApproverCsr[] {
    const names = this.#byRequester.get(requesterKey(csr)) ?? new Set<string>();
    return [...names].map((n) => this.#byName.get(n)!);
  }

  #unindex(csr: ApproverCsr): void {
    const key = requesterKey(csr);
    const names = this.#byRequester.get(key);
    names?.delete(csr.metadata.name);
    if (names?.size === 0) this.#byRequester.delete(key);
  }
}
