/**
 * The trust decisions of a CA rotation, as pure functions of values: may a
 * bundle read from the cluster become the node's trust, which files must be
 * rewritten and which consumers restarted, and when each identity re-issues
 * under the signer's new CA. trust/keeper.ts gathers the values and carries
 * the decisions out.
 */
import { createHash } from 'node:crypto';
import type { Consumer, Identity, IdentityName } from '../identity.js';
import { anchorOf, parseCertificateChain, type CertInfo } from '../pki/certificate.js';
import { checkBundle, type BundleProblem, type TrustBundle } from './bundle.js';
import { statementFor, verifyStatement, type StatementCheck, type StatementProblem, type ValidStatement } from './statement.js';

export type RefusalReason =
  | 'unverified-source'
  | 'unauthenticated-source'
  | 'node-writable-source'
  | BundleProblem
  | 'drops-presented-ca'
  | 'strands-credential'
  | StatementProblem;

/** How the candidate bundle was read. */
export interface Source {
  /** The TLS connection verified the API server against the bundle the node trusts now. */
  verifiedTls: boolean;
  /** The request carried the node's own client certificate. */
  clientCertificate: boolean;
  /** Who the API server says the node is on that connection (SelfSubjectReview); null when not asked. */
  authenticatedAs: string | null;
  /** SelfSubjectAccessReview: may this node change the ConfigMap? null when not asked. */
  nodeCanWrite: boolean | null;
}

export interface HeldCertificate {
  identity: IdentityName;
  certPem: string;
}

export interface BundleInput {
  nodeName: string;
  current: TrustBundle;
  /** The bundle the cluster publishes; null when it publishes none. */
  candidatePem: string | null;
  /** Names the source in messages, e.g. `kube-public/cluster-info`. */
  what: string;
  source: Source;
  /** The certificate chain the API server presented on the verified connection, leaf first. */
  presented: CertInfo[] | null;
  /** Every usable certificate on the node: each must still chain to the new bundle. */
  held: readonly HeldCertificate[];
  /** The trust statement published with the candidate (trust/statement.ts); nulls when none. */
  signed: { payload: string | null; jws: string | null };
  /** The newest statement version this node accepted; 0 when none. */
  floor: number;
  /** When this node last adopted a changed bundle; null when never (or long ago). */
  lastChangeAt: Date | null;
  /** At most one bundle change per this long (the restart window): a fleet is never driven into a restart loop. */
  minChangeIntervalMs: number;
  now: Date;
}

export type BundleDecision =
  /** `statement`: a valid statement for the bundle kept, newer than the floor (its version is recorded); null otherwise. */
  | { kind: 'keep'; why: string; statement: ValidStatement | null }
  | { kind: 'refuse'; reason: RefusalReason; message: string }
  | { kind: 'defer'; until: Date; message: string }
  | {
      kind: 'adopt';
      bundle: TrustBundle;
      added: string[];
      removed: string[];
      /** The statement that proved it; null for a removal adopted on the checks alone. */
      statement: ValidStatement | null;
    };

/**
 * Pure: the statement published with `bundle`, verified against what the node
 * trusts now and the version floor; the valid one, or why not.
 */
export function judgeStatement(
  signed: BundleInput['signed'],
  trusted: TrustBundle,
  bundleHash: string,
  floor: number,
  now: Date,
): StatementCheck {
  return statementFor(verifyStatement({ signed, trusted, now }), bundleHash, floor);
}

/**
 * Cheap first look, before any evidence is gathered: whether the candidate
 * differs from what the node trusts (by the set of CAs). Unparseable text
 * counts as different, so it is judged (and refused) by decideBundle.
 */
export function bundleChanged(current: TrustBundle, candidatePem: string | null, now: Date): boolean {
  if (candidatePem === null) return false;
  const checked = checkBundle(candidatePem, now, '');
  return !checked.ok || checked.bundle.hash !== current.hash;
}

/** Pure: adopt, keep or refuse a candidate bundle. Every refusal is one line naming the source and the reason. */
export function decideBundle(input: BundleInput): BundleDecision {
  const refuse = (reason: RefusalReason, message: string): BundleDecision => ({
    kind: 'refuse',
    reason,
    message: `${input.what}: ${message}; keeping the current CA bundle`,
  });
  const { source } = input;
  if (!source.verifiedTls) return refuse('unverified-source', 'read over a connection not verified by the trusted CA bundle; ignored');
  if (input.candidatePem === null) return { kind: 'keep', why: `${input.what} publishes no CA bundle`, statement: null };
  const checked = checkBundle(input.candidatePem, input.now, input.what);
  if (!checked.ok) return { kind: 'refuse', reason: checked.problem, message: `${checked.message}; keeping the current CA bundle` };
  const bundle = checked.bundle;
  if (bundle.hash === input.current.hash) {
    const check = judgeStatement(input.signed, input.current, bundle.hash, input.floor, input.now);
    return { kind: 'keep', why: 'the published CA bundle is the one trusted', statement: check.ok ? check : null };
  }
  const want = `system:node:${input.nodeName}`;
  if (!source.clientCertificate || source.authenticatedAs !== want)
    return refuse(
      'unauthenticated-source',
      `read without the node's client certificate being authenticated as ${want} (the API server saw ${source.authenticatedAs ?? 'nobody'})`,
    );
  if (source.nodeCanWrite !== false)
    return refuse(
      'node-writable-source',
      source.nodeCanWrite === null
        ? 'could not confirm that nodes cannot change it'
        : `${want} may change it, so any node could redirect every node's trust; remove that permission (only cluster admins may write it)`,
    );
  if (input.presented === null || input.presented.length === 0)
    return refuse('drops-presented-ca', 'the certificate the API server presents is unknown');
  if (anchorOf(input.presented, bundle.cas) === null)
    return refuse(
      'drops-presented-ca',
      `the new CA bundle does not verify the certificate the API server presents now (issuer CN=${input.presented[0]!.issuerCommonName.slice(0, 64)}); adopting it would cut this node off`,
    );
  for (const held of input.held) {
    let chain: CertInfo[];
    try {
      chain = parseCertificateChain(held.certPem);
    } catch {
      continue;
    }
    if (anchorOf(chain, bundle.cas) === null)
      return refuse(
        'strands-credential',
        `the new CA bundle does not contain the CA of the ${held.identity} certificate (issuer CN=${chain[0]!.issuerCommonName.slice(0, 64)}); re-issue it under a CA of the new bundle first`,
      );
  }
  const before = new Set(input.current.pins);
  const after = new Set(bundle.pins);
  const added = bundle.pins.filter((p) => !before.has(p));
  const removed = input.current.pins.filter((p) => !after.has(p));
  // The proof: a CA is added only on the word of a CA already trusted, for exactly this bundle, newer than
  // the last word accepted. A removal narrows trust and stands on the checks above (a signed one still moves the floor).
  const check = judgeStatement(input.signed, input.current, bundle.hash, input.floor, input.now);
  if (added.length > 0 && !check.ok) return refuse(check.problem, `adds ${added.join(', ')} without a valid signature: ${check.message}`);
  if (input.lastChangeAt !== null) {
    const until = new Date(input.lastChangeAt.getTime() + input.minChangeIntervalMs);
    if (input.now < until)
      return {
        kind: 'defer',
        until,
        message: `${input.what}: the CA bundle changed again within the restart window (last change ${input.lastChangeAt.toISOString()}); following at most one change per window, next at ${until.toISOString()}`,
      };
  }
  return { kind: 'adopt', bundle, added, removed, statement: check.ok ? check : null };
}

/** A file kubeboot owns that carries the cluster CA, and who reads it. */
export interface TrustFile {
  path: string;
  kind: 'kubeconfig' | 'client-ca';
  /** Who reads it only at start, so restarts to use a new bundle; null when nobody must. */
  consumer: Consumer | null;
  /** The bundle hash the file holds now; null when absent or unreadable. */
  heldHash: string | null;
}

/** The identities' kubeconfigs, each read by the consumer its identity declares (never one guessed from its name). */
export function kubeconfigFiles(held: readonly { identity: Identity; heldHash: string | null }[]): TrustFile[] {
  return held.flatMap(({ identity, heldHash }) =>
    identity.kubeconfigPath === null
      ? []
      : [{ path: identity.kubeconfigPath, kind: 'kubeconfig' as const, consumer: identity.consumer, heldHash }],
  );
}

export interface RewritePlan {
  /** In write order: the kubelet's kubeconfig last, as the commit point a crash is recovered from. */
  rewrite: TrustFile[];
  /**
   * Consumers that must restart to use the bundle. client-go reads a
   * kubeconfig's certificate-authority-data once, when the transport is built
   * (client-go transport.go, loadTLSFiles/rootCertPool), so a kubeconfig's CA
   * takes a restart. The kubelet reloads its client-CA file on its own
   * (cmd/kubelet/app/auth.go: NewDynamicCAContentFromFile), so that file
   * alone restarts nothing.
   */
  restart: Consumer[];
}

/** Pure: which files differ from `bundleHash`, and whom that makes restart. */
export function rewritePlan(bundleHash: string, files: readonly TrustFile[]): RewritePlan {
  const stale = files.filter((f) => f.heldHash !== bundleHash);
  const order = (f: TrustFile) => (f.kind === 'client-ca' ? 0 : f.consumer === 'kubelet' ? 2 : 1);
  const rewrite = [...stale].sort((a, b) => order(a) - order(b));
  const restart = [...new Set(rewrite.flatMap((f) => (f.kind === 'kubeconfig' && f.consumer !== null ? [f.consumer] : [])))];
  return { rewrite, restart };
}

/**
 * A delay in [0, windowMs) that is the same for the same node and key: the
 * fleet spreads evenly over the window, and a node that restarts kubeboot
 * keeps its slot instead of drawing a new one (no burst after a mass restart).
 */
export function spreadOffset(nodeName: string, key: string, windowMs: number): number {
  if (windowMs <= 0) return 0;
  const digest = createHash('sha256').update(`${nodeName}|${key}`).digest();
  return Math.floor((digest.readUInt32BE(0) / 2 ** 32) * windowMs);
}

export interface ReissueInput {
  nodeName: string;
  /** The pin of the CA the cluster's signer issues under now (published with the bundle); null when not published. */
  signerPin: string | null;
  bundle: TrustBundle;
  held: readonly HeldCertificate[];
  /** When this node first saw `signerPin`; the window starts there. */
  since: Date;
  windowMs: number;
  /** Identities already re-issued once for this signer whose certificate still is not under it (not retried). */
  attempted: ReadonlySet<IdentityName>;
}

export interface Reissue {
  identity: IdentityName;
  at: Date;
}

/**
 * Pure: which identities re-issue early, and when. Only when the node trusts
 * the signer's CA (otherwise the new certificate would be refused), only for
 * certificates not already under it, each at its own slot in the window.
 */
export function reissuePlan(input: ReissueInput): Reissue[] {
  if (input.signerPin === null || !input.bundle.pins.includes(input.signerPin)) return [];
  const signer = input.bundle.cas[input.bundle.pins.indexOf(input.signerPin)]!;
  const out: Reissue[] = [];
  for (const held of input.held) {
    if (input.attempted.has(held.identity)) continue;
    let chain: CertInfo[];
    try {
      chain = parseCertificateChain(held.certPem);
    } catch {
      continue;
    }
    if (anchorOf(chain, [signer]) !== null) continue;
    const offset = spreadOffset(input.nodeName, `${input.signerPin}|${held.identity}`, input.windowMs);
    out.push({ identity: held.identity, at: new Date(input.since.getTime() + offset) });
  }
  return out;
}

/** The pin of the bundle CA a certificate hangs from, or null. */
export function issuerPin(certPem: string, bundle: TrustBundle): string | null {
  try {
    const anchor = anchorOf(parseCertificateChain(certPem), bundle.cas);
    return anchor ? bundle.pins[bundle.cas.indexOf(anchor)]! : null;
  } catch {
    return null;
  }
}
