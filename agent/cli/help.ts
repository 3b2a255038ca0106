/** The `--help` text: commands, every option (from the one options table), exit codes. */
import { renderOptionsHelp } from '../config/options.js';

export const EXIT_CODES_HELP = `Exit codes:
  0  success: every enabled identity holds a proven credential (check: all checks passed)
  1  other failure (API unreachable, unexpected response, interrupted)
  2  bad configuration or input (the message names the file and the field)
  3  a CSR was denied or failed (the message carries the reason)
  4  timed out waiting for a CSR to be approved and signed`;

export function helpText(): string {
  return `kubeboot — TLS bootstrap and certificate rotation for Kubernetes worker nodes

Usage: kubeboot <command> [options]

Commands:
  bootstrap   obtain every missing credential once, prove it, delete the bootstrap token; exit
  run         bootstrap what is missing, then keep renewing before expiry (the systemd service)
  check       validate configuration, bootstrap kubeconfig, reachability and existing credentials; change nothing
  status      show each identity's subject, issuer, expiry, files, next renewal and last error
  renew       ask the running daemon to renew now (or renew directly when no daemon runs)
  wait        return once an identity (--identity) or every enabled one holds a valid credential on disk;
              reads files only (an ExecStartPre= for kube-proxy.service); exit 4 after --timeout

${renderOptionsHelp()}
Other options:
  --help      show this text
  --version   print kubeboot's and Node's versions

${EXIT_CODES_HELP}
`;
}
