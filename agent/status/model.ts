/**
 * The node's status, as `kubeboot status` shows it: per identity, what is on
 * disk (the current certificate, its kubeconfig, a CSR in flight), what the
 * daemon last did (its status.json) and, for the kubelet, who renews it.
 * Read-only; the command only prints it.
 */
import type { Config } from '../config/types.js';
import { identitiesFor } from '../config/identities.js';
import { currentCertPath } from '../identity.js';
import { parseCertificateChain } from '../pki/certificate.js';
import { loadCurrent } from '../store/cert-store.js';
import { readDaemonState } from '../daemon/state.js';
import { publicState, type IdentityState } from '../renewal/record.js';
import { describePending, pendingCsr } from '../credential/pending-csr.js';
import { systemClock } from '../time/clock.js';
import { readOptionalOrProblem } from '../read-optional.js';
import { kubeletRenewer, tpmRenewalProblem, type KubeletRenewer } from '../renewal/owner.js';

export interface IdentityStatus {
  identity: string;
  subject: string | null;
  issuer: string | null;
  notBefore: string | null;
  notAfter: string | null;
  expired: boolean | null;
  certificateFile: string | null;
  currentLink: string;
  kubeconfig: string | null;
  error: string | null;
  /** The CSR in flight, from the node's pending key: its name and when it was sent. */
  pendingCsr: { name: string; since: string; description: string } | null;
  daemon: IdentityState | null;
  /** The kubelet identity only: who renews it, kubeboot or the kubelet's own rotation (kubelet.renewal, its configuration file). */
  renewedBy: KubeletRenewer | null;
}

async function kubeletRenewerOf(config: Config): Promise<KubeletRenewer> {
  const file = config.kubelet.configFile;
  const renewer = kubeletRenewer(config.kubelet.renewal, file, await readOptionalOrProblem(file));
  // With --tpm, the kubelet's own renewals are refused: said before the certificate runs out.
  const tpm = tpmRenewalProblem(config.tpm, renewer);
  return tpm === null ? renewer : { ...renewer, warning: renewer.warning === null ? tpm : `${renewer.warning}; ${tpm}` };
}

export async function collectStatus(config: Config, now = systemClock.now()): Promise<IdentityStatus[]> {
  const daemon = await readDaemonState(config.stateDir);
  const result: IdentityStatus[] = [];
  for (const identity of identitiesFor(config)) {
    const pending = await pendingCsr(config.stateDir, identity);
    const base = {
      identity: identity.name,
      currentLink: currentCertPath(identity),
      kubeconfig: identity.kubeconfigPath,
      pendingCsr: pending ? { name: pending.name, since: pending.since.toISOString(), description: describePending(pending, now) } : null,
      daemon: daemon?.identities[identity.name] ? publicState(daemon.identities[identity.name]!) : null,
      renewedBy: identity.rotatedByKubelet ? await kubeletRenewerOf(config) : null,
    };
    try {
      const current = await loadCurrent(identity);
      if (!current) {
        result.push(withoutCertificate(base, 'no certificate'));
        continue;
      }
      const leaf = parseCertificateChain(current.certPem)[0]!;
      result.push({
        ...base,
        subject: `CN=${leaf.subject.commonName}${leaf.subject.organizations.map((o) => `,O=${o}`).join('')}`,
        issuer: `CN=${leaf.issuerCommonName}`,
        notBefore: leaf.notBefore.toISOString(),
        notAfter: leaf.notAfter.toISOString(),
        expired: leaf.notAfter <= now,
        certificateFile: current.file,
        error: null,
      });
    } catch (err) {
      result.push(withoutCertificate(base, (err as Error).message));
    }
  }
  return result;
}

/** An identity's status when no certificate could be read: why, and every certificate field empty. */
function withoutCertificate(
  base: Omit<IdentityStatus, 'subject' | 'issuer' | 'notBefore' | 'notAfter' | 'expired' | 'certificateFile' | 'error'>,
  error: string,
): IdentityStatus {
  return { ...base, subject: null, issuer: null, notBefore: null, notAfter: null, expired: null, certificateFile: null, error };
}
