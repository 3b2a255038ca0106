/**
 * The CSR object name. It is a digest of everything the request means, so a
 * restarted agent with the same key asks under the same name and finds its
 * earlier CSR instead of filing a second one.
 *
 * matches kubelet digestedName (pkg/kubelet/certificate/bootstrap/bootstrap.go):
 * SHA-512/256 over base64url-without-padding of the PKIX public key, the CN,
 * each O, each usage, each followed by '|' (not in the base64url alphabet, so
 * fields cannot run into each other); the digest itself in the same base64.
 * The result is 9 + 43 characters of [A-Za-z0-9_-]: a valid object name.
 */
import { createHash } from 'node:crypto';
import type { KeyUsage, Subject } from '../identity.js';

export function csrName(publicKeyDer: Uint8Array, subject: Subject, usages: readonly KeyUsage[]): string {
  const hash = createHash('sha512-256');
  const write = (data: Uint8Array | string) => {
    hash.update(Buffer.from(data).toString('base64url'));
    hash.update('|');
  };
  write(publicKeyDer);
  write(subject.commonName);
  for (const o of subject.organizations) write(o);
  for (const usage of usages) write(usage);
  return `node-csr-${hash.digest('base64url')}`;
}
