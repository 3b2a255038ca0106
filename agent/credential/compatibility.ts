/**
 * Whether a CSR already on the server under our name (a create answered 409)
 * is ours to adopt: the create was retried after a lost answer, or a restart
 * finds the CSR it sent before.
 */
import type { Identity } from '../identity.js';
import type { CertificateSigningRequest } from '../kube/csr-state.js';
import { parseCertificateChain } from '../pki/certificate.js';
import { samePublicKey, type PrivateKey } from '../pki/keys.js';
import { sameSubject } from '../pki/names.js';
import { parseCsrPem } from '../pki/pkcs10.js';

/** matches client-go ensureCompatible, plus: a CSR already issued with an expired certificate is not ours to reuse (kubernetes#65991). */
export async function compatibility(
  existing: CertificateSigningRequest,
  identity: Identity,
  key: PrivateKey,
  now: Date,
): Promise<string | null> {
  if (existing.spec.signerName !== identity.signerName) return `signer is ${existing.spec.signerName}, want ${identity.signerName}`;
  let request;
  try {
    request = await parseCsrPem(Buffer.from(existing.spec.request, 'base64').toString('utf8'));
  } catch {
    return 'its request cannot be parsed';
  }
  if (!request.signatureValid || !samePublicKey(request.publicKeyDer, key.publicKeyDer)) return 'it was made with another key';
  if (!sameSubject(request.subject, identity.subject)) {
    return `its subject is CN=${request.subject.commonName}, want CN=${identity.subject.commonName}`;
  }
  const issued = existing.status?.certificate;
  if (issued) {
    const leaf = parseCertificateChain(Buffer.from(issued, 'base64').toString('utf8'))[0];
    if (leaf && leaf.notAfter <= now) return `its certificate expired at ${leaf.notAfter.toISOString()}`;
  }
  return null;
}
