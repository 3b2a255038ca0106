/**
 * The two parts of undici kubeboot uses, its Agent and a request on a given
 * dispatcher, loaded without undici's index: that also loads fetch,
 * WebSocket, EventSource, the cache stores and the mocks, 1.4 MB of the 3 MB
 * a pass process loads, which cost each process about 50 ms of start-up and
 * 5.5 MiB (docs/benchmarks.md, "Time to a Ready Node"). A first boot's
 * kubelet waits for that start-up.
 *
 * undici publishes no "exports" map, so these are files of the package as
 * released; the types are undici's own (undici-internals.d.ts). A release
 * that moves them fails the build and the unit tests, not a node.
 */
import type { Dispatcher } from 'undici';
import UndiciAgent from 'undici/lib/dispatcher/agent.js';
import requestOnThis from 'undici/lib/api/api-request.js';

export const Agent = UndiciAgent;
export type Agent = InstanceType<typeof UndiciAgent>;

/** One request on `dispatcher` (undici's `request(url, { dispatcher })`, without the index that exports it). */
export function requestOn(dispatcher: Dispatcher, options: Dispatcher.RequestOptions): Promise<Dispatcher.ResponseData> {
  return requestOnThis.call(dispatcher, options);
}
