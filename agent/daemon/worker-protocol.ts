/**
 * What the daemon (daemon/daemon.ts) and a worker (daemon/worker.ts) say to
 * each other over Node's IPC channel, and what one worker hands the next
 * (`HandOver`). Plain JSON both ways: dates as ISO strings, the
 * configuration as loaded, identity records as state.ts shapes them.
 *
 * The daemon owns time: its schedule (schedule.ts) says which step is due and
 * it sends it. A worker runs each step it is sent once — look at one identity
 * or at the CA bundle, decide, act — and answers it by id with when to look
 * again. It never sleeps on a deadline; it ends when the daemon says `stop`
 * (nothing is due soon) or goes away. The worker exists so an idle `kubeboot
 * run` holds none of the libraries a step needs (undici, @peculiar/x509,
 * yaml). See docs/architecture.md.
 */
import type { Config } from '../config/types.js';
import { nodeIdentity } from '../config/identities.js';
import type { Cluster, NodeCredential } from '../credential/assess.js';
import type { IdentityName } from '../identity.js';
import type { CaLook, KeeperMemory } from '../trust/keeper.js';
import type { MetricEvents } from './metrics.js';
import type { IdentityRecord } from '../renewal/record.js';

/** What a step looks at: one identity, or the CA bundle (the CA check). */
export type Target = IdentityName | 'ca';

/** One step to run, numbered by the daemon: it is answered once, by this id. */
export interface Step {
  id: number;
  target: Target;
  /** Renew even a certificate that is not due (`kubeboot renew`, SIGHUP, a CA rotation's re-issue slot). */
  force: boolean;
}

/** Only what must outlive a worker, held in the daemon's memory only. */
export interface HandOver {
  /**
   * The kubelet credential last seen valid on disk: if an operator deletes
   * the files, it still authenticates the re-issue (kubernetes#53288). The
   * private key stays in memory and on this local IPC channel only.
   */
  lastGoodKubelet: { certPem: string; keyPem: string; notAfter: string; cluster: Cluster } | null;
  /** The kubelet certificate a worker of this daemon issued (and so proved). */
  provenKubeletPem: string | null;
  trust: KeeperMemory | null;
}

export const EMPTY_HAND_OVER: HandOver = { lastGoodKubelet: null, provenKubeletPem: null, trust: null };

export function carriedCredential(credential: NodeCredential | null): HandOver['lastGoodKubelet'] {
  if (credential === null) return null;
  return {
    certPem: credential.certPem,
    keyPem: credential.keyPem,
    notAfter: credential.notAfter.toISOString(),
    cluster: credential.cluster,
  };
}

/** The carried kubelet credential, bound to this configuration's kubelet identity again. */
export function restoredCredential(config: Config, carried: HandOver['lastGoodKubelet']): NodeCredential | null {
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

/** Daemon → worker. */
export type ToWorker =
  | { kind: 'start'; config: Config; records: IdentityRecord[]; handOver: HandOver; joinFirst: boolean }
  | { kind: 'step'; step: Step }
  /** SIGHUP: the configuration the daemon re-read (and judged), for every later step. */
  | { kind: 'config'; config: Config }
  | { kind: 'stop' };

/** A step's answer: what it found, and what the schedule should do next. */
export interface Answer {
  id: number;
  target: Target;
  /** When this target's next step is due (ISO); null: not until something nudges it. */
  next: string | null;
  /** The identity's record after the step; null for the CA check. */
  record: IdentityRecord | null;
  /** Targets due now because of this step (the kubelet's credential landed; a new certificate asks for a CA look). */
  wake: Target[];
  /** Identities to renew now, due or not (a CA rotation's re-issue slot came). */
  force: IdentityName[];
  /** The CA check's next look, the daemon's to make without a worker (daemon/ca-look.ts); null: a worker looks. */
  look: CaLook | null;
  handOver: HandOver;
}

/** One metric event, as MetricEvents' method name and its arguments (dates as ISO strings). */
export type MetricMessage = {
  [K in keyof MetricEvents]: { kind: 'metric'; name: K; args: WireArgs<Parameters<MetricEvents[K]>> };
}[keyof MetricEvents];
type WireArgs<T extends unknown[]> = { [I in keyof T]: T[I] extends Date ? string : T[I] };

/** Worker → daemon. */
export type FromWorker =
  | { kind: 'answer'; answer: Answer }
  /** An identity's record while its step runs (a CSR was submitted and waits). */
  | { kind: 'record'; record: IdentityRecord }
  | MetricMessage
  | { kind: 'write'; op: 'willWrite' | 'didWrite' | 'willRemove'; path: string }
  /** Sent as it ends after a `stop`: what the worker cost, the price of resting light. */
  | { kind: 'ended'; usage: WorkerUsage };

export interface WorkerUsage {
  cpuSeconds: number;
  maxRssMiB: number;
}

/** The metric events whose second argument is a moment. */
const DATED: ReadonlySet<keyof MetricEvents> = new Set(['recordRenewal', 'csrPending']);

/** Replays a metric message on the daemon's metrics. */
export function applyMetric(metrics: MetricEvents, message: MetricMessage): void {
  const args = (message.args as unknown[]).map((a, i) => (i === 1 && DATED.has(message.name) ? new Date(a as string) : a));
  (metrics[message.name] as (...a: unknown[]) => void)(...args);
}

/** MetricEvents that send every call to the daemon. */
export function forwardingMetrics(send: (message: FromWorker) => void): MetricEvents {
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
