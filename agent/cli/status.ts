/** `kubeboot status`: per identity, what is on disk and what the daemon last did. */
import type { Config } from '../config/types.js';
import { ExitCode } from '../errors.js';
import { identitiesFor } from '../config/identities.js';
import { currentCertPath } from '../identity.js';
import { parseCertificateChain } from '../pki/certificate.js';
import { loadCurrent } from '../store/cert-store.js';
import { readDaemonState, type IdentityState } from '../daemon/state.js';
import { describePending, pendingCsr } from '../credential/pending-csr.js';
import { systemClock } from '../time/clock.js';
import { readOptionalOrProblem } from '../read-optional.js';
import { kubeletRenewer, type KubeletRenewer } from '../renewal/owner.js';

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
  return kubeletRenewer(config.kubelet.renewal, file, await readOptionalOrProblem(file));
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
      daemon: daemon?.identities[identity.name] ?? null,
      renewedBy: identity.name === 'kubelet' ? await kubeletRenewerOf(config) : null,
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

export async function runStatus(config: Config, output: 'text' | 'json', out: NodeJS.WritableStream = process.stdout): Promise<number> {
  const statuses = await collectStatus(config);
  if (output === 'json') {
    out.write(JSON.stringify({ identities: statuses }, null, 2) + '\n');
  } else {
    for (const s of statuses) {
      out.write(`${s.identity}:\n`);
      if (s.error) out.write(`  error:        ${s.error}\n`);
      if (s.subject) {
        out.write(
          `  subject:      ${s.subject}\n  issuer:       ${s.issuer}\n  not after:    ${s.notAfter}${s.expired ? ' (EXPIRED)' : ''}\n  file:         ${s.certificateFile}\n`,
        );
      }
      out.write(`  current link: ${s.currentLink}\n`);
      if (s.kubeconfig) out.write(`  kubeconfig:   ${s.kubeconfig}\n`);
      if (s.pendingCsr) out.write(`  pending:      ${s.pendingCsr.description}\n`);
      if (s.renewedBy) out.write(`  renewed by:   ${s.renewedBy.by}: ${s.renewedBy.why}\n`);
      if (s.renewedBy?.warning) out.write(`  warning:      ${s.renewedBy.warning}\n`);
      if (s.daemon) {
        out.write(
          `  next renewal: ${s.daemon.nextRenewal ?? 'not scheduled'}\n  last success: ${s.daemon.lastSuccess ?? 'never'}\n  last error:   ${s.daemon.lastError ?? 'none'}\n`,
        );
        for (const hook of s.daemon.lastHooks)
          out.write(
            `  hook:         ${hook.argv.join(' ')} -> ${hook.ok ? 'ok' : `failed (exit ${hook.exitCode ?? 'signal'})`} at ${hook.at}\n`,
          );
      }
    }
  }
  return statuses.every((s) => s.subject !== null && s.expired === false) ? ExitCode.ok : ExitCode.other;
}

/** An identity's status when no certificate could be read: why, and every certificate field empty. */
function withoutCertificate(
  base: Omit<IdentityStatus, 'subject' | 'issuer' | 'notBefore' | 'notAfter' | 'expired' | 'certificateFile' | 'error'>,
  error: string,
): IdentityStatus {
  return { ...base, subject: null, issuer: null, notBefore: null, notAfter: null, expired: null, certificateFile: null, error };
}
