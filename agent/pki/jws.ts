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
 * Whether `jws` signs `payload` with this token: it must be exactly the
 * compact JWS the bootstrapsigner computes, as cluster-bootstrap's
 * DetachedTokenIsValid recomputes and compares (with ==; here in constant
 * time). Byte equality leaves no room for another header (alg none, crit, a
 * second kid) or for another spelling of the same signature.
 */
export function verifyDetachedJws(jws: string, payload: string, tokenId: string, tokenSecret: string): boolean {
  const actual = Buffer.from(jws.trim(), 'utf8');
  const expected = Buffer.from(signDetachedJws(payload, tokenId, tokenSecret), 'utf8');
  return actual.length === expected.length && timingSafeEqual(actual, expected);
}
