/**
 * A signed trust statement: the cluster admin's proof that a CA bundle
 * published in kube-public/cluster-info is theirs. Whoever may write that
 * ConfigMap (the bootstrap signer, any `edit` binding in kube-public, an
 * add-on with cluster-wide ConfigMap write) can change the bundle; only the
 * holder of a CA key the nodes already trust can sign a statement over it.
 * As in TUF's root rotation, the new trust is signed by the old one and
 * carries a version that only moves forward, so an old statement (or one for
 * a retired CA) cannot be replayed.
 *
 * A version is the second (unix time) the statement was published, so a node
 * can tell one from the future: a version more than MAX_VERSION_AHEAD_S ahead
 * of its clock is refused and never becomes its floor. Without that bound one
 * statement at version 2^53-1, signed by a leaked key of a CA still trusted,
 * would make every later statement look old on every node that saw it: no CA
 * could be added again. Versions below the clock are old statements, kept
 * comparable: statements of earlier releases (their versions too were at
 * least the publishing second) still compare against a floor as before.
 *
 * Wire form, beside `data.kubeconfig` in the ConfigMap:
 * - `data["kubeboot-trust"]`: the statement, JSON (below), as signed;
 * - `data["kubeboot-trust.jws"]`: a detached compact JWS over exactly those
 *   bytes (RFC 7515 appendix F, `header..signature`, as cluster-bootstrap's
 *   `jws-kubeconfig-<id>`), protected header exactly {"alg","kid"}: alg
 *   RS256, ES256/384/512 or EdDSA by the CA's key type (never HS* or none),
 *   kid the signing CA's `sha256:` pin. The bootstrap signer only touches
 *   keys starting `jws-kubeconfig-`, so it leaves these alone.
 */
import { createPublicKey, sign as signBytes, verify as verifyBytes, type KeyObject } from 'node:crypto';
import type { TrustBundle } from './bundle.js';

const KIND = 'kubeboot.io/trust-statement';
/**
 * How far ahead of a node's clock a version may be: the skew between the
 * admin's clock and a node's that still counts as the same second. NTP keeps
 * clocks within a second; 10 minutes leaves room for a node whose time is
 * wrong by a few minutes, and is also the most a leaked CA key can push a
 * node's floor past the admin's next publish.
 */
export const MAX_VERSION_AHEAD_S = 600;
/** A statement is a few hundred bytes; anything much larger is not one. */
const MAX_STATEMENT_BYTES = 8 * 1024;

export interface TrustStatement {
  kind: typeof KIND;
  /**
   * The second of publication (unix time), moving forward: a node refuses a
   * statement not newer than the last one it accepted, or more than
   * MAX_VERSION_AHEAD_S ahead of its clock.
   */
  version: number;
  /** TrustBundle.hash of exactly the bundle signed for (the set of its CAs). */
  bundle: string;
  /** The CAs' pins, for the person reading the ConfigMap; the hash is what binds. */
  cas: string[];
  /** The CA the cluster signer issues under, or null. */
  signerPin: string | null;
  issuedAt: string;
  /** Nodes accept it for adding a CA until then: bounds how long a node with no memory (a new one) can be replayed to. */
  expiresAt: string;
}

export interface SignedStatement {
  payload: string;
  jws: string;
}

export type StatementProblem =
  | 'unsigned'
  | 'malformed-signature'
  | 'untrusted-signer'
  | 'bad-signature'
  | 'signature-expired'
  | 'signature-mismatch'
  | 'replayed'
  | 'future-version';

export type StatementCheck =
  | { ok: true; statement: TrustStatement; signedBy: string }
  | { ok: false; problem: StatementProblem; message: string };

export type ValidStatement = Extract<StatementCheck, { ok: true }>;

type Alg = 'RS256' | 'ES256' | 'ES384' | 'ES512' | 'EdDSA';

/** The one JWS algorithm a key may sign with: chosen by the key, so a signature can never pick a weaker one. */
export function algorithmOf(key: KeyObject): Alg {
  const type = key.asymmetricKeyType;
  if (type === 'rsa') return 'RS256';
  if (type === 'ed25519') return 'EdDSA';
  if (type === 'ec') {
    const curve = key.asymmetricKeyDetails?.namedCurve;
    if (curve === 'prime256v1') return 'ES256';
    if (curve === 'secp384r1') return 'ES384';
    if (curve === 'secp521r1') return 'ES512';
  }
  throw new Error(`a ${type ?? 'unknown'} key cannot sign a trust statement (RSA, ECDSA P-256/384/521 or Ed25519)`);
}

function digestOf(alg: Alg): string | null {
  return alg === 'EdDSA' ? null : alg === 'ES384' ? 'sha384' : alg === 'ES512' ? 'sha512' : 'sha256';
}

function b64(text: string): string {
  return Buffer.from(text, 'utf8').toString('base64url');
}

/** Signs `statement` with `key` (the private key of the CA whose pin is `kid`). The payload is the exact text published. */
export function signStatement(statement: TrustStatement, key: KeyObject, kid: string): SignedStatement {
  const alg = algorithmOf(key);
  const payload = `${JSON.stringify(statement)}\n`;
  const header = b64(JSON.stringify({ alg, kid }));
  const signature = signBytes(digestOf(alg), Buffer.from(`${header}.${b64(payload)}`), { key, dsaEncoding: 'ieee-p1363' });
  return { payload, jws: `${header}..${signature.toString('base64url')}` };
}

export interface VerifyInput {
  /** The statement and its JWS as published; null when absent. */
  signed: { payload: string | null; jws: string | null };
  /** The bundle the node trusts now: only a CA in it may sign. */
  trusted: TrustBundle;
  now: Date;
}

/**
 * Pure: whether the statement is signed by a CA of the bundle the node
 * trusts now, well formed and unexpired. What it is for (which bundle, which
 * version) is judged by the caller against the candidate (statementFor).
 */
export function verifyStatement(input: VerifyInput): StatementCheck {
  const no = (problem: StatementProblem, message: string): StatementCheck => ({ ok: false, problem, message });
  const { payload, jws } = input.signed;
  if (!payload || !jws)
    return no('unsigned', 'the change carries no signed trust statement (kubeboot ca-rotation publish --ca-key signs one)');
  if (Buffer.byteLength(payload) > MAX_STATEMENT_BYTES || jws.length > MAX_STATEMENT_BYTES)
    return no('malformed-signature', 'the trust statement is too large');
  const parts = jws.trim().split('.');
  if (parts.length !== 3 || parts[1] !== '')
    return no('malformed-signature', 'the trust statement signature is not a detached compact JWS');
  let header: Record<string, unknown>;
  try {
    header = JSON.parse(Buffer.from(parts[0]!, 'base64url').toString('utf8')) as Record<string, unknown>;
  } catch {
    return no('malformed-signature', 'the trust statement signature header is not JSON');
  }
  // Exactly alg and kid: no crit, jku, x5c or embedded key that could name another verifier.
  const keys = header && typeof header === 'object' ? Object.keys(header).sort() : [];
  if (keys.join(',') !== 'alg,kid' || typeof header.alg !== 'string' || typeof header.kid !== 'string')
    return no('malformed-signature', 'the trust statement signature header must hold exactly alg and kid');
  const at = input.trusted.pins.indexOf(header.kid);
  if (at < 0)
    return no('untrusted-signer', `the trust statement is signed by ${header.kid.slice(0, 80)}, which is no CA this node trusts now`);
  const publicKey = createPublicKey(input.trusted.cas[at]!.pem);
  let alg: Alg;
  try {
    alg = algorithmOf(publicKey);
  } catch (err) {
    return no('bad-signature', (err as Error).message);
  }
  if (header.alg !== alg)
    return no('bad-signature', `the trust statement is signed with ${header.alg.slice(0, 16)}; that CA's key signs ${alg}`);
  const signature = Buffer.from(parts[2]!, 'base64url');
  const good = verifyBytes(
    digestOf(alg),
    Buffer.from(`${parts[0]}.${b64(payload)}`),
    { key: publicKey, dsaEncoding: 'ieee-p1363' },
    signature,
  );
  if (!good) return no('bad-signature', `the trust statement's signature does not verify with the key of ${header.kid}`);
  const statement = parseStatement(payload);
  if (statement === null) return no('malformed-signature', 'the signed trust statement is not a kubeboot trust statement');
  const ahead = statement.version - nowSeconds(input.now);
  if (ahead > MAX_VERSION_AHEAD_S)
    return no(
      'future-version',
      `the trust statement has version ${statement.version}, ${ahead} s ahead of this node's clock (versions are the second of publication; at most ${MAX_VERSION_AHEAD_S} s ahead is accepted): a CA key used outside \`kubeboot ca-rotation publish\`, or a wrong clock; refused and not recorded`,
    );
  if (input.now.getTime() >= Date.parse(statement.expiresAt))
    return no(
      'signature-expired',
      `the trust statement (version ${statement.version}) expired at ${statement.expiresAt}; publish it again`,
    );
  return { ok: true, statement, signedBy: header.kid };
}

/**
 * Pure: a verified statement vouches for `bundleHash` only when it names
 * exactly that bundle and is newer than `floor`, the last version this node
 * accepted (0 when it has none).
 */
export function statementFor(check: StatementCheck, bundleHash: string, floor: number): StatementCheck {
  if (!check.ok) return check;
  const { statement } = check;
  if (statement.bundle !== bundleHash)
    return {
      ok: false,
      problem: 'signature-mismatch',
      message: `the trust statement (version ${statement.version}) is signed for another CA bundle`,
    };
  if (statement.version <= floor)
    return {
      ok: false,
      problem: 'replayed',
      message: `the trust statement has version ${statement.version}; this node already accepted version ${floor} (an old statement cannot be published again: sign a new one)`,
    };
  return check;
}

export function nowSeconds(now: Date): number {
  return Math.floor(now.getTime() / 1000);
}

/**
 * Pure: the floor a node compares against. A recorded floor more than
 * MAX_VERSION_AHEAD_S ahead of the clock cannot come from a statement this
 * release accepts (an earlier release recorded any version, or the node's
 * clock ran ahead when it did): it is brought back to the clock's second, so
 * the admin's next publish is accepted and every statement published before
 * now stays refused.
 */
export function effectiveFloor(recorded: number, now: Date): { floor: number; clamped: boolean } {
  const at = nowSeconds(now);
  return recorded - at > MAX_VERSION_AHEAD_S ? { floor: at, clamped: true } : { floor: recorded, clamped: false };
}

function parseStatement(payload: string): TrustStatement | null {
  let s: Partial<TrustStatement>;
  try {
    s = JSON.parse(payload) as Partial<TrustStatement>;
  } catch {
    return null;
  }
  if (!s || typeof s !== 'object' || s.kind !== KIND) return null;
  if (typeof s.version !== 'number' || !Number.isSafeInteger(s.version) || s.version < 1) return null;
  if (typeof s.bundle !== 'string' || !/^[0-9a-f]{64}$/.test(s.bundle)) return null;
  if (!Array.isArray(s.cas) || !s.cas.every((p) => typeof p === 'string')) return null;
  if (s.signerPin !== null && typeof s.signerPin !== 'string') return null;
  if (typeof s.issuedAt !== 'string' || typeof s.expiresAt !== 'string' || Number.isNaN(Date.parse(s.expiresAt))) return null;
  return s as TrustStatement;
}

/**
 * The version an admin publishes after `previous` (the version published now,
 * 0 when none): the current second, or one past `previous` when that is
 * already this second or later (two publishes in one second) yet still within
 * what nodes accept. A `previous` further ahead than that is no version any
 * node recorded (they refuse it): it is ignored, and `ignoredAhead` says so.
 */
export function nextVersion(previous: number, now: Date): { version: number; ignoredAhead: number | null } {
  const at = nowSeconds(now);
  if (previous + 1 <= at) return { version: at, ignoredAhead: null };
  if (previous + 1 <= at + MAX_VERSION_AHEAD_S) return { version: previous + 1, ignoredAhead: null };
  return { version: at, ignoredAhead: previous };
}

/**
 * The statement an admin publishes for `bundle` (its version: nextVersion), so
 * a wiped or lost statement in the ConfigMap cannot make the next publish look
 * older than what nodes hold.
 */
export function nextStatement(
  bundle: TrustBundle,
  signerPin: string | null,
  previous: number,
  now: Date,
  validForMs: number,
): TrustStatement {
  return {
    kind: KIND,
    version: nextVersion(previous, now).version,
    bundle: bundle.hash,
    cas: bundle.pins,
    signerPin,
    issuedAt: now.toISOString(),
    expiresAt: new Date(now.getTime() + validForMs).toISOString(),
  };
}
