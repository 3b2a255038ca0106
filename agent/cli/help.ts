/** The `--help` text: commands, every option (from the one options table), exit codes. */
import { renderOptionsHelp } from '../config/options.js';

export const EXIT_CODES_HELP = `Exit codes:
  0  success: every enabled identity holds a proven credential (check: all checks passed)
  1  other failure (API unreachable, unexpected response, interrupted)
  2  bad configuration or input (the message names the file and the field)
  3  a CSR was denied or failed (the message carries the reason)
  4  timed out waiting for a CSR to be approved and signed
  (token, user-data, join-command: 1 = cluster unreachable or the admin credential refused or forbidden,
   2 = no or bad admin kubeconfig, invalid --groups/--usages/--ttl, unknown token id)`;

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
  approver    cluster side: approve kube-proxy client (and, opted in, kubelet serving) CSRs that pass every rule
  approver-kubeconfig (cluster admin) write the approver's kubeconfig: user kubeboot:approver, a client
              certificate from kubernetes.io/kube-apiserver-client approved with the admin kubeconfig

Cluster admin commands (use the admin kubeconfig, like kubectl):
  token create|list|delete ID
              make, show (never the secret) or delete bootstrap tokens (Secrets in kube-system)
  user-data   print cloud-init user-data (or --format script) that installs kubeboot and joins a node
  join-command print \`kubeboot bootstrap --server … --token … --ca-cert-hash …\` for a node with the package

${renderOptionsHelp()}
Other options:
  --help      show this text
  --version   print kubeboot's and Node's versions

${EXIT_CODES_HELP}
`;
}
