/**
 * The node side of a cluster CA rotation, inside `kubeboot run`: look at the
 * bundle published in kube-public/cluster-info over the node's own
 * connection (its kubelet certificate, verified against the bundle it trusts
 * now), let trust/decide.ts judge it, and carry the decision out: write every
 * kubeconfig kubeboot owns and the kubelet's client-CA file atomically,
 * restart the kubelet and kube-proxy once per change at this node's slot in
 * a window, re-issue certificates early once the signer issues under the new
 * CA, and keep the Node's rotation annotation current for the admin.
 *
 * Poll, not watch: a look every interval (jittered) and after every renewal,
 * each one a step the daemon schedules (`step`); the keeper never sleeps.
 * A rotation is paced by an admin over hours; every step restarts the API
 * server, which would drop 1,000 watches at once and have them all
 * re-established in the same second; a GET with resourceVersion=0 is served
 * from the watch cache (see `npm run bench:fleet` for what it costs).
 */
import type { Dispatcher } from 'undici';
import path from 'node:path';
import { consumerRestarts } from '../config/identities.js';
import type { Config } from '../config/types.js';
import { assessNode, isNodeCredential, type Assessment, type NodeCredential } from '../credential/assess.js';
import { ApiError, UnreadableInputError } from '../errors.js';
import { currentCertPath, type Consumer, type IdentityName } from '../identity.js';
import { CLUSTER_INFO } from '../kube/discovery.js';
import { KubeClient, presentedChain, type ClientAuth, type Endpoint } from '../kube/client.js';
import { annotateNode, canChangeClusterInfo, nodeWarning, readPublishedTrust, type PublishedTrust } from '../kube/trust-requests.js';
import { objectPath } from '../kube/objects.js';
import { whoAmI } from '../kube/whoami.js';
import { renderIdentityKubeconfig } from '../kubeconfig/render.js';
import type { Logger } from '../log.js';
import { parseCertificateChain } from '../pki/certificate.js';
import { toPem } from '../pki/pem.js';
import { storeOf, type Store } from '../store/store.js';
import type { Clock } from '../time/clock.js';
import { trustedBundle, type TrustBundle } from './bundle.js';
import { STATE_FILE } from './floor.js';
import { effectiveFloor, MAX_VERSION_AHEAD_S, type ValidStatement } from './statement.js';
import {
  bundleChanged,
  decideBundle,
  judgeStatement,
  issuerPin,
  kubeconfigFiles,
  reissuePlan,
  rewritePlan,
  spreadOffset,
  type BundleDecision,
  type HeldCertificate,
  type TrustFile,
} from './decide.js';

const WHAT = 'kube-public/cluster-info';
const MAX_AHEAD_MIN = MAX_VERSION_AHEAD_S / 60;

/** What survives a restart of kubeboot, so a change restarts each consumer once and the slots stay put. */
interface KeeperState {
  /** Bundle hash each consumer was last restarted for (or started with: the first hash seen). */
  restarted: Partial<Record<Consumer, string>>;
  /** A restart owed: for which bundle, and when. */
  pending: Partial<Record<Consumer, { hash: string; at: string }>>;
  /** The signer CA last published, when this node first saw it, and who was already re-issued for it. */
  signer: { pin: string; since: string; attempted: IdentityName[] } | null;
  /**
   * The newest signed trust statement accepted (trust/statement.ts): its version is the floor an older one
   * cannot go below, and its signer pin is the one followed while the node holds its bundle.
   */
  accepted?: { version: number; bundle: string; signerPin: string | null } | null;
  /** The last time a changed bundle was adopted, and the bundles held before it (alternation is noticed). */
  changes?: { hash: string; at: string }[];
}

/** How far back a return to an earlier bundle counts as alternating publications. */
const ALTERNATION_MS = 24 * 3600_000;

/** What the keeper counts; the daemon's metrics (daemon/metrics.ts) serve them. */
export interface CaRotationMetrics {
  /** A published CA bundle was refused for `reason` (and stays refused until adopted or cleared). */
  caBundleRefused(reason: string): void;
  /** The published bundle is no longer refused. */
  caBundleRefusalCleared(): void;
  caBundleAdopted(): void;
  caRestart(consumer: string, ok: boolean): void;
}

/** Log and patch de-duplication, handed from one worker to the next (daemon/worker-protocol.ts). */
export interface KeeperMemory {
  lastRefusal: string | null;
  lastAnnotation: string | null;
  forbiddenLogged: boolean;
}

/**
 * What the resting daemon needs to make the next look itself (daemon/ca-look.ts),
 * offered only while the keeper has nothing pending: no restart or re-issue
 * slot ahead, no deferred or refused bundle, the Node's annotation current,
 * the node's credential on disk. Plain JSON; no key bytes (the look reads
 * the kubelet's -current.pem when it connects).
 */
export interface CaLook {
  /** kube-public/cluster-info on the API server the kubelet's kubeconfig names, from the watch cache (resourceVersion=0). */
  url: string;
  /** The bundle the server must chain to: the kubelet kubeconfig's CA, as the keeper verifies it. */
  caPem: string;
  tlsServerName: string | null;
  /** The kubelet's client certificate and key (its -current.pem): the look authenticates as the keeper does. */
  certFile: string;
  keyFile: string;
  /** clusterInfoDigest (kube/cluster-info-digest.ts) of what the keeper last acted on. */
  digest: string;
  /** When the next look is due (ISO). */
  at: string;
  /** No look stands in for the keeper from then on (ISO): a CA of the bundle, or the trust statement, expires. */
  until: string;
  /**
   * The node's Node object, when it did not exist at the last check (the
   * kubelet registers it): the look asks for it too, and its appearance
   * starts a worker, which writes the annotation owed.
   */
  node?: string;
}

export interface RotationStatus {
  /** Hash of the bundle in the node's files. */
  bundle: string;
  /** Every consumer restarted since that bundle was written (it is in use). */
  active: boolean;
  /** Identity → pin of the bundle CA its certificate hangs from. */
  issuers: Partial<Record<IdentityName, string | null>>;
  /** The last refusal's reason while the published bundle is refused (or `churn` while a change waits); null otherwise. */
  refused: string | null;
  /** The version of the newest signed trust statement accepted; null when none. */
  version: number | null;
}

export interface KeeperDeps {
  config: () => Config;
  logger: Logger;
  clock: Clock;
  random: () => number;
  signal: AbortSignal;
  dispatcher?: Dispatcher | undefined;
  /** The node's valid kubelet credential, or null. */
  nodeCredential: () => NodeCredential | null;
  /** Runs `fn` with no credential write of issuance in between (see `serialize`). */
  serialize: <T>(fn: () => Promise<T>) => Promise<T>;
  /** Renew this identity now, even before its deadline. */
  reissue: (identity: IdentityName) => void;
  /** Runs restart commands one after another; true when all succeeded. */
  runCommands: (argvs: string[][], consumer: Consumer) => Promise<boolean>;
  /** Where the node's files are read and written (the worker's disk store tells its write observer); unset, the files on disk. */
  store?: Store | undefined;
  metrics: CaRotationMetrics;
  /** Seam for tests: the chain the API server presents. */
  presented?: (endpoint: Endpoint, credential: ClientAuth) => Promise<Uint8Array[]>;
}

export class TrustKeeper {
  readonly #deps: KeeperDeps;
  readonly #store: Store;
  #state: KeeperState | null = null;
  #lastRefusal: string | null = null;
  #lastAnnotation: string | null = null;
  #forbiddenLogged = false;
  /** The statement payload last judged for the bundle held, so a refused one is said once. */
  #lastIgnored: string | null = null;
  /** The last annotation was not written because the Node does not exist (404). */
  #nodeMissing = false;
  #status: RotationStatus | null = null;
  /** What the last check leaves for a cheap look (see CaLook), without `at`; null when it left something pending. */
  #quiet: Omit<CaLook, 'at'> | null = null;

  constructor(deps: KeeperDeps, memory?: KeeperMemory) {
    this.#deps = deps;
    this.#store = storeOf(deps);
    if (memory) {
      this.#lastRefusal = memory.lastRefusal;
      this.#lastAnnotation = memory.lastAnnotation;
      this.#forbiddenLogged = memory.forbiddenLogged;
    }
  }

  /** What the next worker needs so it does not log, count or patch again what this one already did. */
  get memory(): KeeperMemory {
    return {
      lastRefusal: this.#lastRefusal,
      lastAnnotation: this.#lastAnnotation,
      forbiddenLogged: this.#forbiddenLogged,
    };
  }

  get status(): RotationStatus | null {
    return this.#status;
  }

  /**
   * One step of the CA check, as the daemon's schedule asks for it: one look
   * (`check`), and when to look again — every interval (jittered, as the
   * kubelet's own jitter spreads a fleet), sooner when a restart or re-issue
   * slot comes, never sooner than a second from now. With `look`, nothing is
   * pending and the daemon may make that next look itself (daemon/ca-look.ts).
   */
  async step(): Promise<{ next: Date; look: CaLook | null }> {
    const { clock, logger } = this.#deps;
    const config = this.#deps.config();
    let next = new Date(clock.now().getTime() + config.caRotation.interval * 1000 * (0.8 + 0.4 * this.#deps.random()));
    try {
      const due = await this.check();
      // A slot in the past must not turn into a busy loop.
      if (due && due < next) next = new Date(Math.max(due.getTime(), clock.now().getTime() + 1000));
    } catch (err) {
      if (this.#deps.signal.aborted) throw err;
      logger.warn(`CA rotation: could not check ${WHAT}: ${(err as Error).message}; trying again at ${next.toISOString()}`);
    }
    const quiet = this.#quiet;
    const look = quiet !== null && next.getTime() < Date.parse(quiet.until) ? { ...quiet, at: next.toISOString() } : null;
    return { next, look };
  }

  /**
   * The kubelet does not start without its client-CA file. When the file
   * does not exist yet (a new node, or caRotation.clientCaFile just set),
   * it is written from the CA the kubelet's kubeconfig trusts, before
   * READY=1 lets the kubelet start: a look needs the API and the RBAC for
   * cluster-info, this needs neither. Later looks keep the file current.
   */
  async seedClientCa(caPem: string): Promise<void> {
    const config = this.#deps.config();
    const file = config.caRotation.clientCaFile;
    if (!config.caRotation.enabled || file === null) return;
    await this.#deps.serialize(async () => {
      // Only a missing file is seeded: one that is there but unusable (a directory, too big) is the operator's to fix.
      const there = await this.#store.read(file).then(
        (text) => text !== null,
        (err: unknown) => {
          if (err instanceof UnreadableInputError) return true;
          throw err;
        },
      );
      if (there) return;
      await this.#store.write(file, trustedBundle(caPem).pem, { mode: 0o644 });
      this.#deps.logger.info(`CA rotation: wrote the kubelet's client-CA file ${file} from the CA its kubeconfig trusts`);
    });
  }

  /**
   * One look: observe (the node's files, what cluster-info publishes, and
   * for a changed bundle who serves it), decide (decide.ts, pure), apply
   * (write, restart, re-issue, report). Returns when something is due next.
   */
  async check(): Promise<Date | null> {
    this.#quiet = null;
    const seen = await this.#observe();
    if (seen === null) return null;
    try {
      return await this.#apply(seen, seen.source === null ? null : decideBundle(bundleQuestion(seen, seen.source)));
    } finally {
      await seen.client.close();
    }
  }

  /** What one look finds; null when there is nothing to look with, or nodes may not read cluster-info. */
  async #observe(): Promise<Observation | null> {
    const { logger } = this.#deps;
    const config = this.#deps.config();
    // The files first: after an adoption they hold the bundle that verifies the API server now.
    const onDisk = await assessNode(config, this.#deps.clock.now(), undefined, this.#store);
    const fromDisk = isNodeCredential(onDisk.kubelet);
    const node = isNodeCredential(onDisk.kubelet) ? onDisk.kubelet : this.#deps.nodeCredential();
    if (node === null) return null;
    const state = await this.#loadState(config);
    const credential: ClientAuth = { kind: 'client-certificate', certPem: node.certPem, keyPem: node.keyPem };
    const client = new KubeClient(node.cluster, credential, this.#deps.dispatcher);
    try {
      let published: PublishedTrust;
      try {
        published = await readPublishedTrust(client, this.#deps.signal);
      } catch (err) {
        if (err instanceof ApiError && err.status === 403) {
          if (!this.#forbiddenLogged)
            logger.warn(
              `CA rotation: nodes may not read ${WHAT} (403); apply packaging/manifests/node-ca-rotation-rbac.yaml (kubectl apply -f /usr/share/kubeboot/manifests/) so CA rotations reach this node`,
            );
          this.#forbiddenLogged = true;
          await client.close();
          return null;
        }
        throw err;
      }
      const now = this.#deps.clock.now();
      const { floor, clamped } = effectiveFloor(state.accepted?.version ?? 0, now);
      if (clamped && state.accepted) {
        logger.warn(
          `CA rotation: ${path.join(config.stateDir, STATE_FILE)} records trust statement version ${state.accepted.version}, more than ${MAX_AHEAD_MIN} min ahead of this clock (an earlier release recorded any version, or the clock ran ahead); the floor is now ${floor} (this second): the next \`kubeboot ca-rotation publish\` is followed, every statement published before now stays refused`,
        );
        state.accepted = { ...state.accepted, version: floor };
      }
      let current: TrustBundle;
      try {
        current = trustedBundle(node.cluster.caPem);
      } catch {
        await client.close();
        return null; // the kubeconfig check already calls the credential unusable
      }
      const changed = bundleChanged(current, published.caPem, now);
      // Who serves the changed bundle, and as whom it sees this node: asked only when there is a change to judge.
      const source = changed
        ? await Promise.all([
            whoAmI(client, this.#deps.signal).then(
              (u) => u.username,
              () => null,
            ),
            canChangeClusterInfo(client, this.#deps.signal).catch(() => null),
            (this.#deps.presented ?? presentedChain)(node.cluster, credential)
              .then((ders) => ders.flatMap((der) => parseCertificateChain(toPem('CERTIFICATE', der))))
              .catch(() => null),
          ]).then(([user, nodeCanWrite, presented]) => ({ user, nodeCanWrite, presented }))
        : null;
      return {
        config,
        node,
        fromDisk,
        state,
        client,
        published,
        now,
        current,
        held: heldCertificates(onDisk.others, node),
        changed,
        source,
      };
    } catch (err) {
      await client.close();
      throw err;
    }
  }

  /** Carries out what was decided for the published bundle (`decision`: null when it did not change). */
  async #apply(seen: Observation, decision: BundleDecision | null): Promise<Date | null> {
    if (decision?.kind === 'defer') return this.#defer(seen, decision);
    if (decision?.kind === 'refuse') return this.#refuse(seen, decision);
    this.#lastRefusal = null;
    return this.#follow(seen, decision);
  }

  /** Not a refusal of the bundle: it is followed once the window since the last change has passed. */
  async #defer(seen: Observation, decision: Extract<BundleDecision, { kind: 'defer' }>): Promise<Date> {
    const { config, state, client, published, current } = seen;
    const key = `churn|${published.caPem ?? ''}`;
    if (this.#lastRefusal !== key) {
      this.#deps.logger.warn(`CA rotation: ${decision.message}`);
      this.#deps.metrics.caBundleRefused('churn');
    }
    this.#lastRefusal = key;
    await this.#report(config, client, current, 'churn');
    const due = await this.#restartsDue(config, state);
    await this.#saveState(config, state);
    return earliest(due, decision.until)!;
  }

  /** Said once per refused publication (log, counter, Event); restarts owed for the bundle already adopted stay due. */
  async #refuse(seen: Observation, decision: Extract<BundleDecision, { kind: 'refuse' }>): Promise<Date | null> {
    const { config, state, client, published, now, current } = seen;
    const key = `${decision.reason}|${published.caPem ?? ''}|${published.signed.payload ?? ''}`;
    if (this.#lastRefusal !== key) {
      this.#deps.logger.error(`CA rotation: ${decision.message}`);
      this.#deps.metrics.caBundleRefused(decision.reason);
      // `kubectl get events --field-selector reason=CABundleRefused` shows every refusing node.
      await nodeWarning(
        client,
        config.nodeName,
        'CABundleRefused',
        `${decision.reason}: ${decision.message}`,
        now,
        this.#deps.signal,
      ).catch((err: Error) => this.#deps.logger.debug(`CA rotation: cannot record an Event: ${err.message}`));
    }
    this.#lastRefusal = key;
    await this.#report(config, client, current, decision.reason);
    const due = await this.#restartsDue(config, state);
    await this.#saveState(config, state);
    return due;
  }

  /** Adopts a changed bundle, or keeps the current one, and owes what follows: rewritten files, restarts, re-issues, the report. */
  async #follow(seen: Observation, decision: Extract<BundleDecision, { kind: 'adopt' | 'keep' }> | null): Promise<Date | null> {
    const { config, node, state, client, published, now, current, held } = seen;
    const accepted = decision === null ? this.#unchangedStatement(seen) : decision.statement;
    const target = decision?.kind === 'adopt' ? decision.bundle : current;
    if (decision?.kind === 'adopt') {
      const proof = accepted ? `signed by ${accepted.signedBy}, version ${accepted.statement.version}` : 'a removal, unsigned';
      this.#deps.logger.info(
        `CA rotation: adopting the CA bundle published in ${WHAT} (${decision.bundle.cas.length} CA(s); added ${decision.added.join(', ') || 'none'}; removed ${decision.removed.join(', ') || 'none'}; ${proof})`,
      );
      this.#deps.metrics.caBundleAdopted();
      await this.#noteChange(client, config, state, current.hash, target.hash, now);
    }
    if (accepted) {
      const { version, bundle, signerPin } = accepted.statement;
      state.accepted = { version, bundle, signerPin };
    }
    // Only a signed statement moves the signer: an unsigned annotation could make every node re-issue at once.
    const signerPin = state.accepted?.bundle === target.hash ? state.accepted.signerPin : null;
    this.#deps.metrics.caBundleRefusalCleared();
    await this.#rewrite(config, target, state);
    const due = await this.#restartsDue(config, state);
    const reissueAt = this.#reissue(config, signerPin, target, held, state, now);
    await this.#saveState(config, state);
    await this.#report(config, client, target, null);
    const next = earliest(due, reissueAt);
    if (next === null && !seen.changed && seen.fromDisk && (this.#nodeMissing || this.#lastAnnotation === JSON.stringify(this.#status)))
      this.#quiet = quietLook(node, published.digest, target, accepted, this.#nodeMissing ? config.nodeName : null);
    return next;
  }

  /** The published statement for a bundle that did not change: it may still move the floor; a CA key signing outside `publish` is worth one line (and a count) per statement. */
  #unchangedStatement(seen: Observation): ValidStatement | null {
    const { state, published, now, current } = seen;
    const check = judgeStatement(published.signed, current, current.hash, state.accepted?.version ?? 0, now);
    if (!check.ok && check.problem === 'future-version' && this.#lastIgnored !== published.signed.payload) {
      this.#deps.logger.warn(`CA rotation: ${WHAT}: ${check.message}`);
      this.#deps.metrics.caBundleRefused(check.problem);
    }
    this.#lastIgnored = published.signed.payload;
    return check.ok ? check : null;
  }

  /**
   * Remember the change (at most one per restart window follows it); a return to a bundle held within a day
   * is alternating publications: said once per return (log, counter, Event), followed no faster than the window.
   */
  async #noteChange(client: KubeClient, config: Config, state: KeeperState, from: string, to: string, now: Date): Promise<void> {
    const recent = (state.changes ?? []).filter((c) => now.getTime() - Date.parse(c.at) < ALTERNATION_MS);
    if (recent.some((c) => c.hash === to)) {
      const message = `the CA bundle published in ${WHAT} went back to ${to.slice(0, 12)}, held within the last day: alternating publications are followed at most once per restart window; check who writes ${WHAT}`;
      this.#deps.logger.warn(`CA rotation: ${message}`);
      this.#deps.metrics.caBundleRefused('alternating');
      await nodeWarning(client, config.nodeName, 'CABundleAlternating', message, now, this.#deps.signal).catch((err: Error) =>
        this.#deps.logger.debug(`CA rotation: cannot record an Event: ${err.message}`),
      );
    }
    state.changes = [...recent, { hash: from, at: now.toISOString() }].slice(-8);
  }

  /** Bring every owned file to `bundle`, as one unit with issuance; schedule the restarts that takes. */
  async #rewrite(config: Config, bundle: TrustBundle, state: KeeperState): Promise<void> {
    const { logger } = this.#deps;
    await this.#deps.serialize(async () => {
      const now = this.#deps.clock.now();
      // Read inside the unit: a renewal that just landed is what is on disk now.
      const node = await assessNode(config, now, undefined, this.#store);
      const files = await this.#trustFiles(config, node.kubelet, node.others);
      const plan = rewritePlan(bundle.hash, files);
      for (const file of plan.rewrite) {
        if (file.kind === 'client-ca') {
          await this.#store.write(file.path, bundle.pem, { mode: 0o644 });
        } else {
          const owner = [node.kubelet, ...node.others].find((a) => a.identity.kubeconfigPath === file.path)!;
          // Never a kubeconfig whose CA and certificate disagree: a certificate the bundle does not cover waits for its re-issue.
          if (owner.state === 'usable' && issuerPin(owner.certPem, bundle) === null) {
            logger.warn(
              `CA rotation: ${file.path} keeps its CA bundle: its certificate is not under any CA of the new bundle (it is re-issued first)`,
            );
            continue;
          }
          const { server, tlsServerName } = owner.cluster!;
          await this.#store.write(file.path, renderIdentityKubeconfig(owner.identity, { server, caPem: bundle.pem, tlsServerName }));
        }
        logger.info(`CA rotation: ${file.path} now holds the CA bundle ${bundle.hash.slice(0, 12)}`);
      }
      for (const consumer of plan.restart) {
        if (state.restarted[consumer] === bundle.hash || state.pending[consumer]?.hash === bundle.hash) continue;
        const windowMs = config.caRotation.restartWindow * 1000;
        const at = new Date(now.getTime() + spreadOffset(config.nodeName, `${bundle.hash}|${consumer}`, windowMs));
        state.pending[consumer] = { hash: bundle.hash, at: at.toISOString() };
        logger.info(`CA rotation: ${consumer} reads its kubeconfig's CA only at start; restarting it at ${at.toISOString()}`);
      }
      // A consumer started before kubeboot first saw any bundle uses what its files hold.
      for (const f of files)
        if (f.kind === 'kubeconfig' && f.consumer !== null && state.restarted[f.consumer] === undefined && !state.pending[f.consumer])
          state.restarted[f.consumer] = f.heldHash ?? bundle.hash;
    });
  }

  async #trustFiles(config: Config, kubelet: Assessment, others: Assessment[]): Promise<TrustFile[]> {
    const files: TrustFile[] = [];
    const clientCa = config.caRotation.clientCaFile;
    if (clientCa)
      files.push({
        path: clientCa,
        kind: 'client-ca',
        consumer: 'kubelet',
        heldHash: hashOf(await this.#store.read(clientCa).catch(() => null)),
      });
    const held = [kubelet, ...others].flatMap((a) =>
      a.cluster === null ? [] : [{ identity: a.identity, heldHash: hashOf(a.cluster.caPem) }],
    );
    return [...files, ...kubeconfigFiles(held)];
  }

  /** Run the restarts that are due; the earliest one still owed otherwise. */
  async #restartsDue(config: Config, state: KeeperState): Promise<Date | null> {
    const now = this.#deps.clock.now();
    for (const { consumer, restart } of consumerRestarts(config)) {
      const owed = state.pending[consumer];
      if (!owed || new Date(owed.at) > now) continue;
      const ok = await this.#deps.runCommands(restart, consumer);
      this.#deps.metrics.caRestart(consumer, ok);
      if (ok) this.#deps.logger.info(`CA rotation: ${consumer} restarted for CA bundle ${owed.hash.slice(0, 12)}`);
      else this.#deps.logger.error(`CA rotation: restarting ${consumer} failed; it keeps the CA bundle it started with until it restarts`);
      // Once per change: a failed restart is reported, not repeated on every look.
      state.restarted[consumer] = owed.hash;
      delete state.pending[consumer];
    }
    return this.#pendingRestartsDue(state);
  }

  #pendingRestartsDue(state: KeeperState): Date | null {
    const times = Object.values(state.pending).map((p) => new Date(p.at));
    return times.sort((a, b) => a.getTime() - b.getTime())[0] ?? null;
  }

  /** Nudge the identities whose slot came; the earliest slot still ahead otherwise. */
  #reissue(
    config: Config,
    signerPin: string | null,
    bundle: TrustBundle,
    held: HeldCertificate[],
    state: KeeperState,
    now: Date,
  ): Date | null {
    if (signerPin === null) {
      state.signer = null;
      return null;
    }
    if (state.signer?.pin !== signerPin) state.signer = { pin: signerPin, since: now.toISOString(), attempted: [] };
    const signer = state.signer;
    const plan = reissuePlan({
      nodeName: config.nodeName,
      signerPin,
      bundle,
      held,
      since: new Date(signer.since),
      windowMs: config.caRotation.reissueWindow * 1000,
      attempted: new Set(signer.attempted),
    });
    let next: Date | null = null;
    for (const r of plan) {
      if (r.at <= now) {
        this.#deps.logger.info(`CA rotation: the signer issues under ${signerPin}; re-issuing ${r.identity} now (this node's slot)`);
        signer.attempted.push(r.identity);
        this.#deps.reissue(r.identity);
      } else if (next === null || r.at < next) next = r.at;
    }
    return next;
  }

  /** Keep the Node's annotation current; written only when it changes. */
  async #report(config: Config, client: KubeClient, bundle: TrustBundle, refused: string | null): Promise<void> {
    const node = await assessNode(config, this.#deps.clock.now(), undefined, this.#store);
    const usable = [node.kubelet, ...node.others].filter((a) => a.state === 'usable');
    const state = this.#state!;
    const issuers: RotationStatus['issuers'] = {};
    for (const a of usable) issuers[a.identity.name] = a.state === 'usable' ? issuerPin(a.certPem, bundle) : null;
    const consumers = (await this.#trustFiles(config, node.kubelet, node.others)).flatMap((f) =>
      f.kind === 'kubeconfig' && f.consumer !== null ? [f.consumer] : [],
    );
    const active = consumers.every((c) => state.restarted[c] === bundle.hash && !state.pending[c]);
    this.#status = { bundle: bundle.hash, active, issuers, refused, version: state.accepted?.version ?? null };
    const value = JSON.stringify(this.#status);
    if (value === this.#lastAnnotation) return;
    this.#nodeMissing = false;
    try {
      await annotateNode(client, config.nodeName, value, this.#deps.signal);
      this.#lastAnnotation = value;
    } catch (err) {
      this.#nodeMissing = err instanceof ApiError && err.status === 404;
      // No Node yet (the kubelet registers it) or no permission: progress is then unknown to the admin, nothing else.
      this.#deps.logger.debug(`CA rotation: cannot annotate Node ${config.nodeName}: ${(err as Error).message}`);
    }
  }

  async #loadState(config: Config): Promise<KeeperState> {
    if (this.#state) return this.#state;
    let state: KeeperState = { restarted: {}, pending: {}, signer: null };
    try {
      const text = await this.#store.read(path.join(config.stateDir, STATE_FILE));
      if (text) state = { ...state, ...(JSON.parse(text) as Partial<KeeperState>) };
    } catch {
      this.#deps.logger.warn(`${path.join(config.stateDir, STATE_FILE)}: unreadable; starting CA rotation bookkeeping afresh`);
    }
    this.#state = state;
    return state;
  }

  async #saveState(config: Config, state: KeeperState): Promise<void> {
    await this.#store.write(path.join(config.stateDir, STATE_FILE), JSON.stringify(state));
  }
}

/** What one look found, for the decision and for carrying it out. */
interface Observation {
  config: Config;
  /** The credential the look authenticated with: the one on disk, or the one the worker holds. */
  node: NodeCredential;
  fromDisk: boolean;
  state: KeeperState;
  client: KubeClient;
  published: PublishedTrust;
  now: Date;
  /** The bundle the node's files trust now. */
  current: TrustBundle;
  held: HeldCertificate[];
  /** cluster-info publishes another bundle than `current`. */
  changed: boolean;
  /** For a changed bundle: who this node is to the API server, whether nodes may write cluster-info, the chain it presents. */
  source: { user: string | null; nodeCanWrite: boolean | null; presented: ReturnType<typeof parseCertificateChain> | null } | null;
}

/** The question decide.ts answers for a changed bundle, from what was observed. */
function bundleQuestion(seen: Observation, source: NonNullable<Observation['source']>): Parameters<typeof decideBundle>[0] {
  const { config, node, state, published, now, current, held } = seen;
  return {
    nodeName: config.nodeName,
    current,
    candidatePem: published.caPem,
    what: WHAT,
    // The client verifies the API server against the bundle the node trusts (kube/client.ts: rejectUnauthorized) and sends the node's certificate.
    source: {
      verifiedTls: node.cluster.caPem.trim() !== '',
      clientCertificate: true,
      authenticatedAs: source.user,
      nodeCanWrite: source.nodeCanWrite,
    },
    presented: source.presented,
    held,
    signed: published.signed,
    floor: state.accepted?.version ?? 0,
    lastChangeAt: state.changes?.length ? new Date(state.changes.at(-1)!.at) : null,
    minChangeIntervalMs: config.caRotation.restartWindow * 1000,
    now,
  };
}

/** The look a resting daemon makes in the keeper's place, good until a CA of `bundle` or the accepted statement expires. */
function quietLook(
  node: NodeCredential,
  digest: string,
  bundle: TrustBundle,
  accepted: ValidStatement | null,
  missingNode: string | null,
): Omit<CaLook, 'at'> | null {
  const ends = [...bundle.cas.map((c) => c.notAfter.getTime()), ...(accepted ? [Date.parse(accepted.statement.expiresAt)] : [])];
  if (ends.length === 0 || ends.some(Number.isNaN)) return null;
  // As KubeClient joins them: a server URL may carry a path prefix.
  const base = new URL(node.cluster.server.endsWith('/') ? node.cluster.server : `${node.cluster.server}/`);
  const url = new URL(`${CLUSTER_INFO.slice(1)}?resourceVersion=0`, base);
  const file = currentCertPath(node.identity);
  return {
    url: url.href,
    caPem: node.cluster.caPem,
    tlsServerName: node.cluster.tlsServerName ?? null,
    certFile: file,
    keyFile: file,
    digest,
    until: new Date(Math.min(...ends)).toISOString(),
    ...(missingNode !== null ? { node: new URL(objectPath('api/v1/nodes', missingNode), base).href } : {}),
  };
}

function heldCertificates(others: Assessment[], node: NodeCredential): HeldCertificate[] {
  return [
    { identity: node.identity.name, certPem: node.certPem },
    ...others.flatMap((a) => (a.state === 'usable' ? [{ identity: a.identity.name, certPem: a.certPem }] : [])),
  ];
}

/** The first of the dates given, null when none is. */
function earliest(...dates: (Date | null)[]): Date | null {
  return dates.filter((d): d is Date => d !== null).sort((a, b) => a.getTime() - b.getTime())[0] ?? null;
}

function hashOf(pem: string | null): string | null {
  if (pem === null) return null;
  try {
    return trustedBundle(pem).hash;
  } catch {
    return null;
  }
}
