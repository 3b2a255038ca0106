/**
 * What the controller remembers of each pending CSR between syncs, keyed by
 * uid (a CSR made again under the same name is another): the request as
 * parsed, the violation last reported, whether it was left pending on a
 * violation, and a resourceVersion the API server could not route. All of it
 * is dropped when the CSR settles or goes (`forget`).
 */
import type { ApproverCsr } from './csr-facts.js';
import { parsedRequest } from './decide.js';
import type { RequestFacts } from './request.js';

/** Parsed requests kept (a CSR's spec.request never changes; a re-check reads the same one). */
const PARSED_KEPT = 4096;

const keyOf = (csr: ApproverCsr): string => csr.metadata.uid ?? csr.metadata.name;

export class CsrMemory {
  /** CSR uid → the resourceVersion the API server answered 404 for on /approval: not decided again until it changes. */
  readonly #unroutable = new Map<string, string | undefined>();
  /** CSR uid → the violation last reported, so a resync does not repeat the Event. */
  readonly #reported = new Map<string, string>();
  /** CSR uid → name, of the CSRs left pending on a violation: decided again when a record changes. */
  readonly #leftPending = new Map<string, string>();
  /** CSR uid → its spec.request as read, and what it parsed to. */
  readonly #parsed = new Map<string, { request: string; facts: Promise<RequestFacts | string> }>();

  /** The parsed spec.request of this CSR, read once per uid (a CSR's spec never changes; the same bytes are checked). */
  request(csr: ApproverCsr): Promise<RequestFacts | string> {
    const key = csr.metadata.uid;
    if (key === undefined || csr.oversizedRequest) return parsedRequest(csr);
    const kept = this.#parsed.get(key);
    if (kept !== undefined && kept.request === csr.spec.request) return kept.facts;
    const facts = parsedRequest(csr);
    if (this.#parsed.size >= PARSED_KEPT) this.#parsed.delete(this.#parsed.keys().next().value as string);
    this.#parsed.set(key, { request: csr.spec.request, facts });
    return facts;
  }

  unroutable(csr: ApproverCsr): void {
    this.#unroutable.set(keyOf(csr), csr.metadata.resourceVersion);
  }

  /** The API server could not route this very version of the CSR. */
  isUnroutable(csr: ApproverCsr): boolean {
    const key = keyOf(csr);
    return this.#unroutable.has(key) && this.#unroutable.get(key) === csr.metadata.resourceVersion;
  }

  /** Records the CSR as left pending on `message`; false when that was already reported. */
  leftPending(csr: ApproverCsr, message: string): boolean {
    const key = keyOf(csr);
    this.#leftPending.set(key, csr.metadata.name);
    if (this.#reported.get(key) === message) return false;
    this.#reported.set(key, message);
    return true;
  }

  /** Names of the CSRs left pending on a violation. */
  pendingNames(): IterableIterator<string> {
    return this.#leftPending.values();
  }

  forget(csr: ApproverCsr): void {
    const key = keyOf(csr);
    this.#reported.delete(key);
    this.#leftPending.delete(key);
    this.#unroutable.delete(key);
    this.#parsed.delete(key);
  }
}
