/** `kubeboot status`: per identity, what is on disk and what the daemon last did. */
import type { Config } from '../config/types.js';
import { ExitCode } from '../errors.js';
import { identitiesFor } from '../config/identities.js';
import { currentCertPath } from '../identity.js';
import { parseCertificateChain } from '../pki/certificate.js';
import { loadCurrent } from '../store/cert-store.js';
import { readDaemonState } from '../daemon/state.js';
import { publicState, type IdentityState } from '../renewal/record.js';
import { describePending, pendingCsr } from '../credential/pending-csr.js';
import { systemClock } from '../time/clock.js';
import { readOptionalOrProblem } from '../read-optional.js';
import { kubeletRenewer, type KubeletRenewer } from '../renewal/owner.js';
import { terminalJson, terminalLines } from '../text.js';

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

export async function runStatus(config: Config, output: 'text' | 'json', out: NodeJS.WritableStream = process.stdout): Promise<number> {
  const statuses = await collectStatus(config);
  // The last error and the certificate's names carry the API server's and the signer's words.
  out.write(output === 'json' ? terminalJson({ identities: statuses }) : terminalLines(statusLines(statuses)));
  return statuses.every((s) => s.subject !== null && s.expired === false) ? ExitCode.ok : ExitCode.other;
}

function statusLines(statuses: IdentityStatus[]): string[] {
  const lines: string[] = [];
  for (const s of statuses) {
    lines.push(`${s.identity}:`);
    if (s.error) lines.push(`  error:        ${s.error}`);
    if (s.subject)
      lines.push(
        `  subject:      ${s.subject}`,
        `  issuer:       ${s.issuer}`,
        `  not after:    ${s.notAfter}${s.expired ? ' (EXPIRED)' : ''}`,
        `  file:         ${s.certificateFile}`,
      );
    lines.push(`  current link: ${s.currentLink}`);
    if (s.kubeconfig) lines.push(`  kubeconfig:   ${s.kubeconfig}`);
    if (s.pendingCsr) lines.push(`  pending:      ${s.pendingCsr.description}`);
    if (s.renewedBy) lines.push(`  renewed by:   ${s.renewedBy.by}: ${s.renewedBy.why}`);
    if (s.renewedBy?.warning) lines.push(`  warning:      ${s.renewedBy.warning}`);
    if (s.daemon) {
      lines.push(
        `  next renewal: ${s.daemon.nextRenewal ?? 'not scheduled'}`,
        `  last success: ${s.daemon.lastSuccess ?? 'never'}`,
        `  last error:   ${s.daemon.lastError ?? 'none'}`,
      );
      for (const hook of s.daemon.lastHooks)
        lines.push(
          `  hook:         ${hook.argv.join(' ')} -> ${hook.ok ? 'ok' : `failed (exit ${hook.exitCode ?? 'signal'})`} at ${hook.at}`,
        );
    }
  }
  return lines;
}

/** An identity's status when no certificate could be read: why, and every certificate field empty. */
function withoutCertificate(
  base: Omit<IdentityStatus, 'subject' | 'issuer' | 'notBefore' | 'notAfter' | 'expired' | 'certificateFile' | 'error'>,
  error: string,
): IdentityStatus {
  return { ...base, subject: null, issuer: null, notBefore: null, notAfter: null, expired: null, certificateFile: null, error };
}
