/** `kubeboot status`: prints the node's status model (status/model.ts) as lines or JSON. */
import type { Config } from '../config/types.js';
import { ExitCode } from '../errors.js';
import { collectStatus, type IdentityStatus } from '../status/model.js';
import { terminalJson, terminalLines } from '../text.js';

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
