/**
 * The `--help` texts. `kubeboot --help`: the commands, every option (from
 * the one options table), exit codes. `kubeboot <command> --help`: that
 * command's usage and only the options it reads, with what they mean for
 * it, as kubectl and kubeadm print per command.
 */
import { COMMAND_FLAGS, commandFlagUsage, defaultText, flagUsage, OPTIONS, renderOptionsHelp, type Command } from '../config/options.js';

export const EXIT_CODES_HELP = `Exit codes:
  0  success: every enabled identity holds a proven credential (check: all checks passed)
  1  other failure (API unreachable, unexpected response, interrupted)
  2  bad configuration or input (the message names the file and the field)
  3  a CSR was denied or failed (the message carries the reason)
  4  timed out waiting for a CSR to be approved and signed
  5  the bootstrap token is dead: no signature for it in kube-public/cluster-info, or the API server refuses it (401); deleted, expired or mistyped (make a new token)
  6  tpm: no TPM to use (none, only /dev/tpm0, no access) or the endorsement hierarchy needs a password
  (token, user-data, join-command, node: 1 = cluster unreachable, the admin credential refused or forbidden,
   kubeboot's records (CustomResourceDefinitions) not installed, or no RBAC lets a new token create its CSR;
   2 = no or bad admin kubeconfig, invalid --groups/--usages/--ttl/--node/--pool/--max-nodes or node name,
   unknown token id, unrevoke of a node not revoked)`;

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
  approver    cluster side: approve kubelet client (unless --no-approve-kubelet-client), kube-proxy client and, opted in, kubelet serving CSRs that pass every rule
  approver-kubeconfig (cluster admin) write the approver's kubeconfig: user kubeboot:approver, a client
              certificate from kubernetes.io/kube-apiserver-client approved with the admin kubeconfig

Cluster admin commands (use the admin kubeconfig, like kubectl):
  token create|list|delete ID
              make, show (never the secret) or delete bootstrap tokens (Secrets in kube-system);
              create --node NAME or --pool PREFIX --max-nodes N binds a token to the names it may join
  node replace|revoke|unrevoke NAME | list
              mark a node as being replaced (its re-join under the same name), revoke or unrevoke its identity
              (pending CSRs denied now, renewals refused), list every node's identity, expiry, renewer, state
  node enroll NAME --tpm-ek HASH [--tpm-ak NAME] | --from-file FILE
              record the node's TPM in the inventory: its kubelet client CSRs then need a quote by that TPM
  records migrate [--dry-run]
              move the ConfigMap records of an earlier release (namespace kubeboot) into kubeboot.io records
  user-data   print cloud-init user-data (or --format script) that installs kubeboot and joins a node
  ca-rotation publish|status|retire
              rotate the cluster CA with no node touched: publish the bundle, follow every node's progress,
              retire the old CA once every node is ready (docs/ca-rotation.md)
  tpm identify print this machine's TPM identity for the inventory: EK public-key hash, AK name, EK certificate
              and, with --ek-ca FILE, whether one of those CAs issued it (docs/tpm.md)
  join-command print \`kubeboot bootstrap --server … --token … --ca-cert-hash …\` for a node with the package

\`kubeboot <command> --help\` shows one command's usage and the options it reads.

${renderOptionsHelp()}
Other options:
  --help      show this text
  --version   print kubeboot's and Node's versions

${EXIT_CODES_HELP}
`;
}

const LOG = ['log-level', 'log-format'];
const JOIN = ['server', 'token', 'token-file', 'ca-cert-hash', 'unsafe-skip-ca-verification', 'unsafe-allow-insecure-bootstrap'];
const IDENTITIES = [
  'kubelet-kubeconfig',
  'kubelet-cert-dir',
  'kube-proxy',
  'kube-proxy-kubeconfig',
  'kube-proxy-cert-dir',
  'kube-proxy-common-name',
  'kube-proxy-organization',
  'kube-proxy-signer',
  'kubelet-serving',
  'kubelet-serving-cert-dir',
  'kubelet-serving-dns-name',
  'kubelet-serving-ip-address',
];
const CA_ROTATION = ['ca-rotation', 'ca-check-interval', 'kubelet-client-ca-file', 'ca-restart-window', 'ca-reissue-window'];
const ISSUE = [
  'bootstrap-kubeconfig',
  'state-dir',
  'node-name',
  'key-algorithm',
  'tpm',
  'expiration-seconds',
  ...JOIN,
  ...IDENTITIES,
  'wait-timeout',
  'pending-notice-interval',
  'hook-timeout',
  'cloud-init-path',
];
const APPROVER = [
  'approver-kubeconfig',
  'approver-listen',
  'lease-namespace',
  'lease-name',
  'lease-duration',
  'renew-deadline',
  'retry-period',
  'resync-period',
  'max-pending-per-requester',
  'max-expiration',
  'max-proxy-serving-expiration',
  'allowed-key-algorithm',
  'approve-kubelet-serving',
  'approve-kubelet-client',
  'unsafe-approve-unbound-tokens',
  'protect-nodes',
  'inventory',
  'tpm-pcr7',
  'serving-dns-suffix',
  'serving-ip-cidr',
  'deny-violations',
  'kube-proxy-common-name',
  'kube-proxy-organization',
];
// user-data and join-command put these in what they print, for the node to use.
const FOR_THE_NODE: Record<string, string> = {
  server: 'API server URL the node joins (default: the server of the admin kubeconfig)',
  token:
    'Bootstrap token to hand the node (or --token-file, KUBEBOOT_TOKEN, --create-token); argv is visible to other users of this machine',
  'token-file': 'Read the bootstrap token to hand the node from this file',
  'ca-cert-hash': 'CA pin the node checks cluster-info against (repeatable; default: the CA of the admin kubeconfig)',
};

export interface CommandHelp {
  usage: string;
  summary: string;
  /** Flags of the options table (agent/config/options.ts) this command reads; its own flags come from COMMAND_FLAGS. */
  options: readonly string[];
  /** What an option or command flag means for this command, where that differs from the table. */
  meanings?: Readonly<Record<string, string>>;
}

export const COMMAND_HELP: Readonly<Record<Command, CommandHelp>> = {
  bootstrap: {
    usage: 'kubeboot bootstrap [options]',
    summary: 'Obtain every missing credential once, prove it, delete the bootstrap token, exit.',
    options: ['config', ...ISSUE, ...LOG],
  },
  run: {
    usage: 'kubeboot run [options]',
    summary: 'Bootstrap what is missing, then renew every credential before it expires (the systemd service).',
    options: ['config', ...ISSUE, 'renew-margin', 'reuse-key', 'kubelet-renewal', 'kubelet-config', ...CA_ROTATION, 'listen', ...LOG],
  },
  check: {
    usage: 'kubeboot check [options]',
    summary: 'Validate configuration, the bootstrap kubeconfig, reachability and existing credentials; change nothing.',
    options: [
      'config',
      'bootstrap-kubeconfig',
      'state-dir',
      'node-name',
      'tpm',
      'kubelet-renewal',
      'kubelet-config',
      ...JOIN,
      ...IDENTITIES,
      ...LOG,
    ],
  },
  status: {
    usage: 'kubeboot status [--output text|json] [options]',
    summary:
      "Show each identity's subject, issuer, expiry and files; with a daemon running also next renewal, last error and hook results.",
    options: ['config', 'state-dir', 'node-name', 'tpm', ...IDENTITIES, 'kubelet-renewal', 'kubelet-config', ...LOG],
  },
  renew: {
    usage: 'kubeboot renew [--identity NAME] [options]',
    summary: 'Ask the running daemon to renew now (SIGUSR2), or renew directly when no daemon runs.',
    options: ['config', ...ISSUE, 'renew-margin', 'reuse-key', ...LOG],
  },
  wait: {
    usage: 'kubeboot wait [--identity NAME] [--timeout DURATION] [options]',
    summary: 'Return once that identity (or every enabled one) holds a valid credential on disk; reads files only. Exit 4 after --timeout.',
    options: ['config', 'state-dir', 'node-name', ...IDENTITIES, 'pending-notice-interval', ...LOG],
  },
  approver: {
    usage: 'kubeboot approver [--kubeconfig PATH] [options]',
    summary:
      'Cluster side: approve kubelet client (first issue under the token binding, and renewal; on unless --no-approve-kubelet-client), kube-proxy client and, opted in, kubelet serving CSRs that pass every rule.',
    options: ['config', ...APPROVER, ...LOG],
    meanings: { kubeconfig: "The approver's own kubeconfig (as approver.kubeconfig); without one the in-cluster service account is used" },
  },
  'approver-kubeconfig': {
    usage: 'kubeboot approver-kubeconfig [--kubeconfig ADMIN-KUBECONFIG] [--approver-kubeconfig PATH] [--ttl DURATION]',
    summary:
      'Cluster admin: write the kubeconfig kubeboot approver runs with: a key made here, a certificate for the user kubeboot:approver from kubernetes.io/kube-apiserver-client, requested and approved with the admin kubeconfig, proven, written 0600.',
    options: ['config', 'approver-kubeconfig', 'key-algorithm', ...LOG],
    meanings: {
      'approver-kubeconfig': 'Where to write the kubeconfig (0600, atomically)',
      kubeconfig: 'The admin kubeconfig (default: the first file in KUBECONFIG, else ~/.kube/config)',
      ttl: 'Certificate lifetime to request (default 8760h; the signer may cap it, at least 10m)',
      'key-algorithm': 'Algorithm of the new key',
    },
  },
  token: {
    usage: 'kubeboot token create [--node NAME | --pool PREFIX --max-nodes N] | list | delete ID [options]',
    summary: `Cluster admin: make a bootstrap token (prints only the token), list them (never the secret) with what each may join, delete one.
--node/--pool write the binding tokenbindings.kubeboot.io/<id> (a record kubeboot approver reads) before the token, and delete
removes it after the token (the names it spent stay spent); without kubeboot's records installed nothing is made (docs/node-identity.md).
create asks the cluster's authorizer what the token may do first: on a kubeadm cluster without kubeboot's RBAC it adds
kubeadm's group system:bootstrappers:kubeadm:default-node-token; where no group may create a CSR it makes nothing (exit 1).`,
    options: [...LOG],
    meanings: {
      kubeconfig: 'The admin kubeconfig (default: the first file in KUBECONFIG, else ~/.kube/config)',
      ttl: 'create: lifetime of the new token (default 1h; 0 only with --no-expiry)',
    },
  },
  node: {
    usage:
      'kubeboot node enroll NAME --tpm-ek HASH [--tpm-ak NAME] | enroll --from-file FILE | replace NAME --old-machine-gone [--for-token ID] | revoke NAME [--reason TEXT] [--delete-node] | unrevoke NAME | list [--output json] [options]',
    summary: `Cluster admin: the node records kubeboot approver reads (nodereplacements.kubeboot.io and noderevocations.kubeboot.io).
replace: the next CSR for system:node:NAME from the token the mark is for (--for-token, else the next token create --node NAME)
may take the name again, spent or with a live Node. Only for a machine known to be gone (--old-machine-gone): nothing in a renewal tells
the old machine's key from the new one's, so a running old machine would renew beside it; otherwise give the new machine a new name.
revoke: kubeboot approver approves no certificate of NAME any more (kubelet client, kube-proxy, serving); its pending
CSRs of every signer are denied now; a certificate already issued lives to its notAfter, which it prints. list: each Node (and revoked name), its identity,
the expiry of its newest kubelet client certificate a CSR still shows ("unknown" once the CSRs are gone), who renews it,
revoked or not, a replacement mark, its TPM enrolment. enroll: writes tpm-ek/tpm-ak into the node's entry of inventories.kubeboot.io/inventory
(the values kubeboot tpm identify prints); with approver --inventory its kubelet client CSRs, first issue and renewal, are then approved
only with a quote by that AK (rule tpm-attested, docs/tpm.md); with --tpm-ek alone, the AK that answers the approver's credential challenge at
the first join is recorded (tpmenrolments.kubeboot.io/NAME) and is that AK from then on. Holds only once the authorizer no longer lets kube-controller-manager approve kubelet client CSRs (revoke warns).`,
    options: [...LOG],
    meanings: {
      kubeconfig: 'The admin kubeconfig (default: the first file in KUBECONFIG, else ~/.kube/config)',
      reason: 'revoke: why; recorded with the revocation and in the message of the CSRs it denies',
      'delete-node': 'revoke: also delete the Node object',
      'for-token': 'replace: the bootstrap token whose first CSR for NAME may claim the mark',
      'old-machine-gone': 'replace: required; the machine being replaced is gone (wiped disk, terminated instance)',
      'tpm-ek': "enroll: the TPM's EK hash (tpm identify's ek-sha256)",
      'tpm-ak': "enroll: the TPM's AK name (tpm identify's ak-name)",
      'from-file': 'enroll: lines `NAME ek-sha256: HASH` / `NAME ak-name: NAME`, many nodes',
      output: 'list: text or json',
    },
  },
  records: {
    usage: 'kubeboot records migrate [--dry-run] [options]',
    summary: `Cluster admin: move the ConfigMap records of an earlier release (namespace kubeboot: token-<id>, replacements, revocations,
inventory) into kubeboot.io records only the cluster admin can write, then delete each ConfigMap. Idempotent; --dry-run writes
nothing. kubeboot approver refuses to act on a ConfigMap record until it is moved; read what --dry-run prints first.`,
    options: [...LOG],
    meanings: { kubeconfig: 'The admin kubeconfig (default: the first file in KUBECONFIG, else ~/.kube/config)' },
  },
  'ca-rotation': {
    usage:
      'kubeboot ca-rotation publish BUNDLE.pem --ca-key CA.key [--signer-ca-hash sha256:HEX] [--valid-for DURATION] [--drop-join-ca] | status [--output json] | retire BUNDLE.pem --ca-key CA.key [--skip-node NAME]... [options]',
    summary:
      'Cluster admin: publish a CA bundle in kube-public/cluster-info, signed with the key of a CA the nodes trust now (nodes add no CA without that signature), show how many nodes trust it and hold certificates under the signer CA (and which lag, why), retire the old CA only when every node is ready. status exits 0 only when every node is ready.',
    options: [...LOG],
    meanings: {
      kubeconfig: 'The admin kubeconfig (default: the first file in KUBECONFIG, else ~/.kube/config)',
    },
  },
  tpm: {
    usage: 'kubeboot tpm identify [--ek-ca FILE] [--output json]',
    summary: `Print this machine's TPM identity, what the inventory records: the EK's public-key hash (SHA-256 of its
SubjectPublicKeyInfo, hex), the AK's TPM name (an ECC P-256 restricted signing key created under the endorsement
hierarchy from a fixed template, the same each time, never stored), the EK certificate from NV 0x01c00002 and, with
--ek-ca, whether a CA in that file issued it. Reads /dev/tpmrm0 and changes nothing in the TPM (docs/tpm.md).
Exit 6 when there is no TPM, only /dev/tpm0, no access, or the endorsement hierarchy has a password; exit 1 when
--ek-ca is given and none of its CAs issued the EK certificate (or there is none), or the certificate is for another key.`,
    options: [...LOG],
  },
  'join-command': {
    usage: 'kubeboot join-command [--create-token [--node NAME] | --token TOKEN | --token-file PATH] [options]',
    summary: `Cluster admin: print \`kubeboot bootstrap --server … --token … --ca-cert-hash …\` for a node that already has the package.
--create-token makes the token as token create does (kubeadm's group on a kubeadm cluster without kubeboot's RBAC);
where kube-proxy runs as the DaemonSet kube-system/kube-proxy (kubeadm's) the line ends in --no-kube-proxy.`,
    options: ['config', 'server', 'token', 'token-file', 'ca-cert-hash', ...LOG],
    meanings: { ...FOR_THE_NODE, kubeconfig: 'The admin kubeconfig (default: the first file in KUBECONFIG, else ~/.kube/config)' },
  },
  'user-data': {
    usage:
      'kubeboot user-data [--create-token [--node NAME | --pool PREFIX --max-nodes N] | --token TOKEN | --token-file PATH] [--repo-url URL --repo-key PATH] [--output-file PATH] [options]',
    summary: `Cluster admin: print cloud-init user-data (or --format script) that writes kubeboot's config and the token (0600), adds the package repository and installs and starts kubeboot.
Needs on the node: apt >= 2.4 (reads the armored key in signed-by=; Debian 12, Ubuntu 22.04) or rpm with dnf/yum (imports
gpgkey= itself); no gpg and no curl. An unbound token joins every node booted with it until it expires (--node and --pool
bind it to names), and cloud-init keeps copies on each node: boot the pool within the token's TTL, then
\`kubeboot token delete ID\` (printed on stderr).
A --repo-url needs its --repo-key (exit 2 without), unless --unsafe-unsigned-repo turns the nodes' signature checks off;
an http:// URL is accepted with a warning (metadata can be withheld or replayed, and the path sees what is installed).
As join-command: a created token carries kubeadm's group on a kubeadm cluster without kubeboot's RBAC, and where kube-proxy
is the DaemonSet kube-system/kube-proxy the node's config gets kubeProxy.enabled: false (--set kubeProxy.enabled wins).`,
    options: ['config', 'server', 'token', 'token-file', 'ca-cert-hash', ...LOG],
    meanings: { ...FOR_THE_NODE, kubeconfig: 'The admin kubeconfig (default: the first file in KUBECONFIG, else ~/.kube/config)' },
  },
};

/** The command flags (not in the options table) a command takes. */
export function commandFlagsOf(command: Command) {
  return COMMAND_FLAGS.filter((c) => c.commands.includes(command));
}

/** `kubeboot <command> --help`. */
export function commandHelpText(command: Command): string {
  const help = COMMAND_HELP[command];
  // The table's text names the commands it is for ("renew, wait: …"); here the command is known.
  const own = (text: string) =>
    command === 'token'
      ? text.replace(/^token create, --create-token: /, 'create: ')
      : text.replace(/^token create, /, '').replace(/^[a-z, -]+: /, '');
  const meaning = (flag: string, fallback: string) => help.meanings?.[flag] ?? own(fallback);
  const lines = [`Usage: ${help.usage}`, '', help.summary, '', 'Options:'];
  for (const c of commandFlagsOf(command)) lines.push(`  ${commandFlagUsage(c)}`, `      ${meaning(c.flag, c.help)}.`);
  for (const flag of help.options) {
    const spec = OPTIONS.find((o) => o.flag === flag);
    if (spec === undefined) throw new Error(`help of ${command} names --${flag}, which the options table lacks`);
    lines.push(`  ${flagUsage(spec)}`, `      ${meaning(flag, spec.help)}.`);
    if (help.meanings?.[flag] === undefined) {
      const where = [spec.env !== null ? `env ${spec.env}` : null, spec.inFile ? `file ${spec.key}` : null];
      lines.push(`      ${where.filter((w) => w !== null).join(', ')}; default ${defaultText(spec)}`);
    }
  }
  lines.push('  --help', '      Show this text.', '', 'Durations are seconds or like 90s, 15m, 2h30m.', '', EXIT_CODES_HELP, '');
  return lines.join('\n');
}
