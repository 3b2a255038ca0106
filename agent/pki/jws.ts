/**
 * The signature kube-controller-manager's bootstrapsigner puts on
 * `kube-public/cluster-info` as `jws-kubeconfig-<token-id>`: proof that whoever
 * published the kubeconfig (and so its CA) knows our bootstrap token.
 *
 * matches cluster-bootstrap token/jws ComputeDetachedSignature: a compact JWS
 * with the payload elided (RFC 7515 appendix F, `header..signature`), HS256,
 * protected header {"alg":"HS256","kid":<token id>}, key = the token secret
 * zero-padded to 32 bytes.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

const BASE64URL = /^[A-Za-z0-9_-]*$/;

// Upstream pads the secret for go-jose's minimum key length; HMAC zero-pads
// short keys to its block size anyway, so this changes no signature.
function hmacKey(tokenSecret: string): Buffer {
  const secret = Buffer.from(tokenSecret, 'utf8');
  return secret.length >= 32 ? secret : Buffer.concat([secret, Buffer.alloc(32 - secret.length)]);
}

function signature(encodedHeader: string, payload: string, tokenSecret: string): Buffer {
  const input = `${encodedHeader}.${Buffer.from(payload, 'utf8').toString('base64url')}`;
  return createHmac('sha256', hmacKey(tokenSecret)).update(input).digest();
}

export function signDetachedJws(payload: string, tokenId: string, tokenSecret: string): string {
  // Key order as go-jose writes it (a Go map, marshalled with sorted keys).
  const header = Buffer.from(JSON.stringify({ alg: 'HS256', kid: tokenId }), 'utf8').toString('base64url');
  return `${header}..${signature(header, payload, tokenSecret).toString('base64url')}`;
}

/**
 * Whether `jws` signs `payload` with this token. Any header that names HS256
 * and our token id is accepted (a JWS verifier need not insist on upstream's
 * byte-exact header); anything else, including critical extensions, is not.
 */
export function verifyDetachedJws(jws: string, payload: string, tokenId: string, tokenSecret: string): boolean {
  const parts = jws.trim().split('.');
  if (parts.length !== 3) return false;
  const [encodedHeader, detached, encodedSignature] = parts as [string, string, string];
  if (detached !== '' || !BASE64URL.test(encodedHeader) || !BASE64URL.test(encodedSignature)) return false;
  let header: unknown;
  try {
    header = JSON.parse(Buffer.from(encodedHeader, 'base64url').toString('utf8'));
  } catch {
    return false;
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) return false;
  const fields = header as Record<string, unknown>;
  if (fields.alg !== 'HS256' || fields.kid !== tokenId || 'crit' in fields) return false;
  const expected = signature(encodedHeader, payload, tokenSecret);
  const actual = Buffer.from(encodedSignature, 'base64url');
  return actual.length === expected.length && timingSafeEqual(actual, expected);
}
