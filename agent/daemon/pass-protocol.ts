/**
 * What the resting daemon (daemon/supervisor.ts) and a pass process
 * (daemon/pass-process.ts) say to each other over Node's IPC channel, and
 * what one pass hands the next (`Carry`). Plain JSON both ways: dates as ISO
 * strings, the configuration as loaded.
 *
 * The pass process exists so an idle `kubeboot run` holds none of the
 * libraries a pass needs (undici, @peculiar/x509, winston): it is started at
 * each deadline, file change or signal, and ends once every identity sleeps
 * for longer than REST_AFTER_MS. See docs/architecture.md.
 */
import type { Config } from '../config/types.js';
import { nodeIdentity } from '../config/identities.js';
import type { Cluster, NodeCredential } from '../credential/assess.js';
import type { IdentityName } from '../identity.js';
import type { CaLook, KeeperMemory } from '../trust/keeper.js';
import type { MetricEvents } from './metrics.js';
import type { IdentityState } from './state.js';

/** The hidden command the supervisor starts a pass with (never typed by a person). */
export const PASS_COMMAND = '__pass';

/** A pass ends once every identity and the CA check sleep at least this long; a shorter wait stays in the process. */
export const REST_AFTER_MS = 2 * 60_000;

/** One identity as the daemon tells the outside about it (/readyz, READY=1, STATUS=, status.json). */
export interface IdentityViewWire {
  name: IdentityName;
  validUntil: string | null;
  expiredAt: string | null;
  state: IdentityState;
}

/** What a pass keeps about one identity that the next pass needs. */
export interface SlotCarry {
  state: IdentityState;
  /** The renewal deadline drawn (with jitter) for one certificate, so it is drawn once per certificate. */
  deadline: { certKey: string; at: string } | null;
  /** Consecutive failures, for the retry back-off. */
  attempt: number;
  /** Who renews the kubelet's certificate, as last logged. */
  renewerSaid?: string;
}

/** Everything one pass hands the next, held in the resting daemon's memory only. */
export interface Carry {
  slots: Partial<Record<IdentityName, SlotCarry>>;
  /**
   * The kubelet credential last seen valid on disk: if an operator deletes
   * the files, it still authenticates the re-issue (kubernetes#53288). The
   * private key stays in memory and on this local IPC channel only.
   */
  lastGoodKubelet: { certPem: string; keyPem: string; notAfter: string; cluster: Cluster } | null;
  /** The kubelet certificate a pass of this daemon issued (and so proved). */
  provenKubeletPem: string | null;
  trust: KeeperMemory | null;
}

export const EMPTY_CARRY: Carry = { slots: {}, lastGoodKubelet: null, provenKubeletPem: null, trust: null };

export function carriedCredential(credential: NodeCredential | null): Carry['lastGoodKubelet'] {
  if (credential === null) return null;
  return {
    certPem: credential.certPem,
    keyPem: credential.keyPem,
    notAfter: credential.notAfter.toISOString(),
    cluster: credential.cluster,
  };
}

/** The carried kubelet credential, bound to this configuration's kubelet identity again. */
export function restoredCredential(config: Config, carried: Carry['lastGoodKubelet']): NodeCredential | null {
  if (carried === null) return null;
  const identity = nodeIdentity(config);
  return {
    identity,
    state: 'usable',
    certPem: carried.certPem,
    keyPem: carried.keyPem,
    notAfter: new Date(carried.notAfter),
    cluster: carried.cluster,
  };
}

/** A wake-up for some identities; `force` renews even a certificate that is not due. Numbered so none is lost when a pass ends. */
export interface Nudge {
  names: IdentityName[] | 'all';
  force: boolean;
  seq: number;
}

/** Supervisor → pass. */
export type ToPass =
  | { kind: 'start'; config: Config; carry: Carry; nudges: Nudge[]; joinFirst: boolean }
  | { kind: 'nudge'; nudge: Nudge }
  | { kind: 'config'; config: Config; seq: number }
  | { kind: 'stop' };

/** One metric event, as MetricEvents' method name and its arguments (dates as ISO strings). */
export type MetricMessage = {
  [K in keyof MetricEvents]: { kind: 'metric'; name: K; args: WireArgs<Parameters<MetricEvents[K]>> };
}[keyof MetricEvents];
type WireArgs<T extends unknown[]> = { [I in keyof T]: T[I] extends Date ? string : T[I] };

/** Pass → supervisor. */
export type FromPass =
  /** `done`: per identity, the last nudge whose step has finished there (a crash after it must not repeat it). */
  | { kind: 'report'; views: IdentityViewWire[]; carry: Carry; done: Partial<Record<IdentityName, number>> }
  /** The earliest moment some loop must show progress again, in ms from now (liveness). */
  | { kind: 'progress'; msLeft: number }
  | MetricMessage
  | { kind: 'write'; op: 'willWrite' | 'didWrite' | 'willRemove'; path: string }
  /**
   * Every loop sleeps; the pass ends. The next pass is due at `until`: an identity's deadline, or the CA
   * check's when `look` is null. With `look`, the daemon makes the CA check's first look itself
   * (daemon/ca-look.ts). Nudges numbered above `lastSeq` were not applied.
   */
  | { kind: 'rest'; until: string; look: CaLook | null; carry: Carry; lastSeq: number; usage: PassUsage };

/** What one pass process cost: the price of resting light, paid per pass. */
export interface PassUsage {
  cpuSeconds: number;
  maxRssMiB: number;
}

/** The metric events whose second argument is a moment. */
const DATED: ReadonlySet<keyof MetricEvents> = new Set(['recordRenewal', 'csrPending']);

/** Replays a metric message on the supervisor's metrics. */
export function applyMetric(metrics: MetricEvents, message: MetricMessage): void {
  const args = (message.args as unknown[]).map((a, i) => (i === 1 && DATED.has(message.name) ? new Date(a as string) : a));
  (metrics[message.name] as (...a: unknown[]) => void)(...args);
}

/** MetricEvents that send every call to the supervisor. */
export function forwardingMetrics(send: (message: FromPass) => void): MetricEvents {
  const forward =
    <K extends keyof MetricEvents>(name: K) =>
    (...args: unknown[]) =>
      send({ kind: 'metric', name, args: args.map((a) => (a instanceof Date ? a.toISOString() : a)) } as MetricMessage);
  return {
    recordRenewal: forward('recordRenewal'),
    recordRenewalFailure: forward('recordRenewalFailure'),
    recordHookFailure: forward('recordHookFailure'),
    observeCsrWait: forward('observeCsrWait'),
    csrPending: forward('csrPending'),
    csrSettled: forward('csrSettled'),
    caBundleRefused: forward('caBundleRefused'),
    caBundleRefusalCleared: forward('caBundleRefusalCleared'),
    caBundleAdopted: forward('caBundleAdopted'),
    caRestart: forward('caRestart'),
  };
}
