/**
 * Every setting, once. The loader, `kubeboot --help` and docs/reference.md's
 * configuration reference are all generated from this table, so a flag that
 * exists is documented and a documented flag exists.
 *
 * The config-file key is the setting's path in `Config` (`kubeProxy.enabled`),
 * the flag is the kebab name, the environment variable is `KUBEBOOT_` plus
 * the flag in upper snake case. Repeatable flags replace the list from the
 * file or environment rather than appending to it; in the environment a list
 * is comma-separated.
 */
import { KEY_ALGORITHMS, KUBELET_RENEWAL_MODES } from '../identity.js';
import { defaultConfig, DEFAULT_CONFIG_FILE } from './defaults.js';
import type { Config } from './types.js';
import { pcr7FlagProblem } from '../tpm/pcr-policy.js';
import {
  bootstrapTokenProblem,
  cidrProblem,
  dns1123SubdomainProblem,
  formatDuration,
  ipProblem,
  labelRequirementProblem,
  parseByteSize,
  serverUrlProblem,
  signerNameProblem,
} from './values.js';

/** Dotted paths to the leaves of Config: `nodeName`, `kubeProxy.enabled`, ... */
type Leaves<T, P extends string = ''> = {
  [K in keyof T & string]: T[K] extends unknown[] | string | number | boolean | null ? `${P}${K}` : Leaves<T[K], `${P}${K}.`>;
}[keyof T & string];
export type ConfigKey = Leaves<Config>;

export type OptionType = 'string' | 'path' | 'bool' | 'duration' | 'enum' | 'strings' | 'paths' | 'listen' | 'pins' | 'hooks';

export interface OptionSpec {
  key: ConfigKey;
  /** Flag name without the leading `--`; null for config-file-only settings. */
  flag: string | null;
  env: string | null;
  /** False only for `--config` itself. */
  inFile: boolean;
  type: OptionType;
  /** Allowed values of an `enum`. */
  values?: readonly string[];
  /** Smallest accepted duration and why (shown in the error). */
  min?: { seconds: number; why?: string };
  /** A duration that may be left unset (YAML `null`). */
  nullable?: boolean;
  /** Extra check of each string item; returns a problem or null. */
  check?: (value: string) => string | null;
  metavar: string;
  help: string;
  /** Shown instead of the value from defaultConfig when that is not meaningful. */
  defaultText?: string;
}

/** `off`, `device`, or `swtpm:` and a loopback address (tests only). */
export function tpmSettingProblem(value: string): string | null {
  if (value === 'off' || value === 'device') return null;
  if (!value.startsWith('swtpm:'))
    return `want off, device or swtpm:127.0.0.1:PORT (tests only), not ${JSON.stringify(value.slice(0, 60))}`;
  const m = /^swtpm:(127\.\d{1,3}\.\d{1,3}\.\d{1,3}|\[::1\]):(\d{1,5})$/.exec(value);
  return m !== null && Number(m[2]) > 0 && Number(m[2]) < 65536
    ? null
    : 'swtpm: wants a loopback address and port, as swtpm:127.0.0.1:PORT';
}

function envName(flag: string): string {
  return `KUBEBOOT_${flag.toUpperCase().replaceAll('-', '_')}`;
}

type Spec = Omit<OptionSpec, 'flag' | 'env' | 'inFile' | 'metavar'> & { metavar?: string };

function opt(flag: string, spec: Spec, inFile = true): OptionSpec {
  return { flag, env: envName(flag), inFile, metavar: spec.metavar ?? METAVAR[spec.type], ...spec };
}
function fileOnly(spec: Spec): OptionSpec {
  return { flag: null, env: null, inFile: true, metavar: spec.metavar ?? METAVAR[spec.type], ...spec };
}

const METAVAR: Record<OptionType, string> = {
  string: 'STRING',
  path: 'PATH',
  bool: '',
  duration: 'DURATION',
  enum: 'NAME',
  strings: 'STRING',
  paths: 'PATH',
  listen: 'HOST:PORT|off',
  pins: 'sha256:HEX',
  hooks: 'ARGV-LIST',
};

const atLeastOne = { seconds: 1 };

export const OPTIONS: readonly OptionSpec[] = [
  opt(
    'config',
    { key: 'configFile', type: 'path', help: 'Config file (YAML); a missing default file is fine, a missing named file is an error' },
    false,
  ),
  opt('bootstrap-kubeconfig', {
    key: 'bootstrapKubeconfig',
    type: 'path',
    help: 'Bootstrap kubeconfig: API server, CA and bootstrap token (kept until the identity is proven)',
  }),
  opt('state-dir', { key: 'stateDir', type: 'path', help: 'Directory for kubeboot state (pending keys, CSR names)' }),
  opt('node-name', {
    key: 'nodeName',
    type: 'string',
    metavar: 'NAME',
    check: dns1123SubdomainProblem,
    defaultText: 'lower-cased hostname',
    help: 'Node name; the kubelet client certificate is issued to system:node:<name>',
  }),
  opt('key-algorithm', { key: 'keyAlgorithm', type: 'enum', values: KEY_ALGORITHMS, help: 'Private key algorithm for new keys' }),
  opt('tpm', {
    key: 'tpm',
    type: 'string',
    metavar: 'off|device',
    check: tpmSettingProblem,
    help: "Attach a quote by this machine's TPM (/dev/tpmrm0 with device) to every kubelet client CSR, first issue and renewal, as the approver's tpm-attested rule requires of a TPM-enrolled name (docs/tpm.md); swtpm:127.0.0.1:PORT reaches a software TPM on loopback, for tests only",
  }),
  opt('expiration-seconds', {
    key: 'expirationSeconds',
    type: 'duration',
    nullable: true,
    min: { seconds: 600, why: 'the API rejects shorter' },
    defaultText: 'unset (the signer decides)',
    help: 'Certificate lifetime to request (spec.expirationSeconds); the signer may cap it',
  }),
  opt('server', {
    key: 'server',
    type: 'string',
    metavar: 'URL',
    check: serverUrlProblem,
    help: 'Join: API server URL; with --token and --ca-cert-hash kubeboot writes the bootstrap kubeconfig itself (CA from pinned discovery) when neither it nor a valid kubelet credential exists',
  }),
  opt('token', {
    key: 'token',
    type: 'string',
    metavar: 'TOKEN',
    check: bootstrapTokenProblem,
    help: 'Join: bootstrap token [a-z0-9]{6}.[a-z0-9]{16} for --server; argv is visible to other users of the machine, so prefer --token-file or KUBEBOOT_TOKEN',
  }),
  opt('token-file', {
    key: 'tokenFile',
    type: 'path',
    help: 'Join: file holding the bootstrap token for --server; deleted with the bootstrap kubeconfig once the node has joined',
  }),
  opt('ca-cert-hash', {
    key: 'caCertHashes',
    type: 'pins',
    help: 'Pin for CA discovery through kube-public/cluster-info (repeatable); only the pinned CA certificates are trusted, so pin each CA of a rotation',
  }),
  opt('unsafe-skip-ca-verification', {
    key: 'unsafeSkipCaVerification',
    type: 'bool',
    help: 'Trust a CA discovered through cluster-info without a pin (unsafe)',
  }),
  opt('unsafe-allow-insecure-bootstrap', {
    key: 'unsafeAllowInsecureBootstrap',
    type: 'bool',
    help: 'Accept a bootstrap kubeconfig with insecure-skip-tls-verify; the CA then still comes from pinned discovery (--ca-cert-hash) or --unsafe-skip-ca-verification (unsafe)',
  }),
  opt('kubelet-kubeconfig', { key: 'kubelet.kubeconfig', type: 'path', help: 'Kubeconfig written for the kubelet' }),
  opt('kubelet-cert-dir', { key: 'kubelet.certDir', type: 'path', help: 'Directory of the kubelet client certificates' }),
  opt('kubelet-renewal', {
    key: 'kubelet.renewal',
    type: 'enum',
    values: KUBELET_RENEWAL_MODES,
    help: 'Who renews the kubelet client certificate: auto follows rotateCertificates in --kubelet-config (true: the kubelet renews it itself and kubeboot only bootstraps it and steps in when nothing valid is left; false or unset: kubeboot renews); kubeboot or kubelet say so outright (set kubelet when the kubelet runs with --rotate-certificates)',
  }),
  opt('kubelet-config', {
    key: 'kubelet.configFile',
    type: 'path',
    help: "The kubelet's KubeletConfiguration file, read for rotateCertificates (a missing file means false, the kubelet's default)",
  }),
  fileOnly({
    key: 'kubelet.hooks',
    type: 'hooks',
    help: 'Commands (argv lists, no shell) run after the kubelet client certificate changed',
  }),
  opt('kube-proxy', {
    key: 'kubeProxy.enabled',
    type: 'bool',
    help: 'Also keep a kube-proxy client certificate (--no-kube-proxy disables)',
  }),
  opt('kube-proxy-kubeconfig', { key: 'kubeProxy.kubeconfig', type: 'path', help: 'Kubeconfig written for kube-proxy' }),
  opt('kube-proxy-cert-dir', { key: 'kubeProxy.certDir', type: 'path', help: 'Directory of the kube-proxy client certificates' }),
  opt('kube-proxy-common-name', {
    key: 'kubeProxy.commonName',
    type: 'string',
    metavar: 'CN',
    help: 'Subject CN of the kube-proxy certificate (kubeboot approver requires exactly this)',
  }),
  opt('kube-proxy-organization', {
    key: 'kubeProxy.organizations',
    type: 'strings',
    metavar: 'ORG',
    help: 'Subject O of the kube-proxy certificate (repeatable; kubeboot approver requires exactly these)',
  }),
  opt('kube-proxy-signer', {
    key: 'kubeProxy.signerName',
    type: 'string',
    metavar: 'SIGNER',
    check: signerNameProblem,
    help: 'Signer for the kube-proxy CSR (kubeboot approver approves only kubernetes.io/kube-apiserver-client; nothing in a stock cluster does)',
  }),
  fileOnly({ key: 'kubeProxy.hooks', type: 'hooks', help: 'Commands (argv lists, no shell) run after the kube-proxy certificate changed' }),
  opt('kubelet-serving', {
    key: 'kubeletServing.enabled',
    type: 'bool',
    help: 'Also keep a kubelet serving certificate (signer kubernetes.io/kubelet-serving)',
  }),
  opt('kubelet-serving-cert-dir', { key: 'kubeletServing.certDir', type: 'path', help: 'Directory of the kubelet serving certificates' }),
  opt('kubelet-serving-dns-name', {
    key: 'kubeletServing.dnsNames',
    type: 'strings',
    metavar: 'DNS-NAME',
    check: dns1123SubdomainProblem,
    defaultText: 'the node name',
    help: 'DNS SAN of the serving certificate (repeatable)',
  }),
  opt('kubelet-serving-ip-address', {
    key: 'kubeletServing.ipAddresses',
    type: 'strings',
    metavar: 'IP',
    check: ipProblem,
    help: 'IP SAN of the serving certificate (repeatable)',
  }),
  fileOnly({
    key: 'kubeletServing.hooks',
    type: 'hooks',
    help: 'Commands (argv lists, no shell) run after the serving certificate changed',
  }),
  opt('wait-timeout', {
    key: 'waitTimeout',
    type: 'duration',
    min: atLeastOne,
    help: 'How long to wait for a CSR to be approved and signed: bootstrap then exits 4, run retries with the same CSR',
  }),
  opt('pending-notice-interval', {
    key: 'pendingNoticeInterval',
    type: 'duration',
    min: atLeastOne,
    help: 'While a CSR is pending, repeat the approve command this often',
  }),
  opt('renew-margin', {
    key: 'renewal.margin',
    type: 'duration',
    help: 'Renew when less lifetime than this remains, even before the 70-90 % point',
  }),
  opt('reuse-key', { key: 'renewal.reuseKey', type: 'bool', help: 'Keep the private key on renewal instead of generating a new one' }),
  opt('hook-timeout', { key: 'renewal.hookTimeout', type: 'duration', min: atLeastOne, help: 'Kill a hook that runs longer than this' }),
  opt('ca-rotation', {
    key: 'caRotation.enabled',
    type: 'bool',
    help: "run: follow the cluster CA bundle published in kube-public/cluster-info (read with the node's own certificate over verified TLS) into every kubeconfig kubeboot writes and the kubelet's client-CA file",
  }),
  opt('ca-check-interval', {
    key: 'caRotation.interval',
    type: 'duration',
    min: { seconds: 5 },
    help: 'run: look at the published CA bundle this often (jittered by up to 20 %), and after every renewal',
  }),
  opt('kubelet-client-ca-file', {
    key: 'caRotation.clientCaFile',
    type: 'path',
    defaultText: 'unset (left alone)',
    help: "run: the kubelet's authentication.x509.clientCAFile, rewritten with the CA bundle (the kubelet reloads it without a restart)",
  }),
  opt('ca-restart-window', {
    key: 'caRotation.restartWindow',
    type: 'duration',
    help: "run: after a CA bundle change, restart the kubelet and kube-proxy (they read a kubeconfig's CA only at start) at this node's slot in this window, so the fleet never restarts at once",
  }),
  opt('ca-reissue-window', {
    key: 'caRotation.reissueWindow',
    type: 'duration',
    help: "run: once the signer issues under a new CA, re-issue every certificate under it at this node's slot in this window",
  }),
  fileOnly({
    key: 'caRotation.kubeletRestart',
    type: 'hooks',
    help: "Commands (argv lists, no shell) that restart the kubelet after its kubeconfig's CA bundle changed",
  }),
  fileOnly({
    key: 'caRotation.kubeProxyRestart',
    type: 'hooks',
    help: "Commands (argv lists, no shell) that restart kube-proxy after its kubeconfig's CA bundle changed",
  }),
  opt('listen', { key: 'listen', type: 'listen', help: 'Address for /healthz, /readyz and /metrics; off disables' }),
  opt('log-level', { key: 'log.level', type: 'enum', values: ['error', 'warn', 'info', 'debug'], help: 'Log level' }),
  opt('log-format', {
    key: 'log.format',
    type: 'enum',
    values: ['json', 'text', 'journal', 'auto'],
    help: 'Log format; auto is journal when stderr is the systemd journal (one line per message with a syslog priority prefix), text on a terminal, JSON otherwise',
  }),
  opt('cloud-init-path', {
    key: 'cloudInitPaths',
    type: 'paths',
    help: 'cloud-init cache checked for a leftover bootstrap token (repeatable)',
  }),
  opt('approver-kubeconfig', {
    key: 'approver.kubeconfig',
    type: 'path',
    help: 'approver: kubeconfig of its own identity (kubeboot approver --kubeconfig sets it too); when the file is absent, the in-cluster service account is used',
  }),
  opt('approver-listen', {
    key: 'approver.listen',
    type: 'listen',
    help: 'approver: address for /healthz, /readyz and /metrics; off disables',
  }),
  opt('lease-namespace', {
    key: 'approver.leaseNamespace',
    type: 'string',
    metavar: 'NAMESPACE',
    check: dns1123SubdomainProblem,
    help: 'approver: namespace of the leader-election Lease',
  }),
  opt('lease-name', {
    key: 'approver.leaseName',
    type: 'string',
    metavar: 'NAME',
    check: dns1123SubdomainProblem,
    help: 'approver: name of the leader-election Lease',
  }),
  opt('lease-duration', {
    key: 'approver.leaseDuration',
    type: 'duration',
    min: { seconds: 2 },
    help: "approver: how long others wait after the leader's last renewal before taking over",
  }),
  opt('renew-deadline', {
    key: 'approver.renewDeadline',
    type: 'duration',
    min: atLeastOne,
    help: 'approver: a leader that could not renew for this long stops approving (less than --lease-duration)',
  }),
  opt('retry-period', {
    key: 'approver.retryPeriod',
    type: 'duration',
    min: atLeastOne,
    help: 'approver: how often to renew or try to take the Lease',
  }),
  opt('resync-period', {
    key: 'approver.resyncPeriod',
    type: 'duration',
    min: atLeastOne,
    help: 'approver: look at every pending CSR again this often (RBAC or Nodes may have changed)',
  }),
  opt('max-pending-per-requester', {
    key: 'approver.maxPendingPerRequester',
    type: 'string',
    metavar: 'SIZE',
    check: (v) => {
      const size = parseByteSize(v);
      if (!size.ok) return size.problem;
      return size.value < 64 * 1024 ? `must be at least 64Ki (one certificate request kept whole), got ${v}` : null;
    },
    help: "approver: bytes one requester's pending CSRs may take in the approver's cache; past it its youngest are left undecided until older ones settle",
  }),
  opt('max-expiration', {
    key: 'approver.maxExpiration',
    type: 'duration',
    min: { seconds: 600, why: 'the API rejects shorter' },
    help: 'approver: largest spec.expirationSeconds approved (unset lets the signer decide)',
  }),
  opt('max-proxy-serving-expiration', {
    key: 'approver.maxProxyServingExpiration',
    type: 'duration',
    min: { seconds: 600, why: 'the API rejects shorter' },
    help: "approver: kube-proxy client CSRs must set spec.expirationSeconds, at most this, and kubelet serving CSRs that set one (the kubelet's own serverTLSBootstrap CSRs cannot): a revoked node's certificates die within it",
  }),
  opt('allowed-key-algorithm', {
    key: 'approver.keyAlgorithms',
    type: 'strings',
    metavar: 'ALGORITHM',
    check: (v) => ((KEY_ALGORITHMS as readonly string[]).includes(v) ? null : `expected one of ${KEY_ALGORITHMS.join(', ')}, got ${v}`),
    help: 'approver: key algorithm a CSR may use (repeatable); RSA below 2048 bits is never approved',
  }),
  opt('approve-kubelet-serving', {
    key: 'approver.kubeletServing',
    type: 'bool',
    help: 'approver: also approve kubelet serving CSRs (signer kubernetes.io/kubelet-serving)',
  }),
  opt('approve-kubelet-client', {
    key: 'approver.kubeletClient',
    type: 'bool',
    help: "approver: approve kubelet client CSRs (signer kubernetes.io/kube-apiserver-client-kubelet; on by default, --no-approve-kubelet-client turns it off; --approve-kubelet-client is accepted and changes nothing): first issue only for the names a bootstrap token is bound to, never a live or control-plane Node's; renewal while the node is not revoked",
  }),
  opt('unsafe-approve-unbound-tokens', {
    key: 'approver.unsafeApproveUnboundTokens',
    type: 'bool',
    help: 'approver: UNSAFE: unless --no-approve-kubelet-client, a bootstrap token with no binding (tokenbindings.kubeboot.io/<id>) gets any node name not yet registered, as many as it asks for',
  }),
  opt('protect-nodes', {
    key: 'approver.protectNodes',
    type: 'strings',
    metavar: 'LABEL',
    check: labelRequirementProblem,
    help: 'approver: never issue the name of an existing Node with this label (key or key=value, repeatable) to a bootstrap token; the control-plane role labels always count',
  }),
  opt('inventory', {
    key: 'approver.inventory',
    type: 'bool',
    help: "approver: the record inventories.kubeboot.io/inventory (spec.nodes) is the authority: kubelet client CSRs (first issue and renewal) only for the node names it lists, serving IP SANs only among the addresses it lists for the node (not the Node's status.addresses); none at all while it is missing",
  }),
  opt('tpm-pcr7', {
    key: 'approver.tpmPcr7',
    type: 'strings',
    metavar: 'PREFIX=SHA256',
    check: pcr7FlagProblem,
    help: "approver, with --inventory: a TPM-bound node whose name starts with PREFIX is issued only when its quote's SHA-256 PCR 7 (secure-boot state) is this value (repeatable: several values, several pools; the longest matching prefix decides, an empty one is every TPM-bound name; approvals report each node's value, docs/tpm.md)",
  }),
  opt('serving-dns-suffix', {
    key: 'approver.servingDnsSuffixes',
    type: 'strings',
    metavar: 'DOMAIN',
    check: dns1123SubdomainProblem,
    help: 'approver: serving DNS SANs may also be the node name under this domain (repeatable)',
  }),
  opt('serving-ip-cidr', {
    key: 'approver.servingIpCidrs',
    type: 'strings',
    metavar: 'CIDR',
    check: cidrProblem,
    help: "approver: serving IP SANs must also lie in one of these (repeatable; the Node's addresses always apply)",
  }),
  opt('deny-violations', {
    key: 'approver.denyViolations',
    type: 'bool',
    help: 'approver: deny a CSR that breaks a rule instead of leaving it pending with an Event',
  }),
];

/** Flags that only some commands take; not part of Config. */
export interface CommandFlagSpec {
  flag: string;
  commands: readonly Command[];
  /** `strings` is repeatable and comma-separated, `repeated` only repeatable; `bool` also takes `--no-<flag>`. */
  type?: 'string' | 'strings' | 'repeated' | 'bool';
  values?: readonly string[];
  metavar: string;
  help: string;
  /** How --help writes a bool flag when not `--flag` (e.g. `--no-expiry`). */
  usage?: string;
}
export const COMMANDS = [
  'bootstrap',
  'run',
  'check',
  'status',
  'renew',
  'wait',
  'approver',
  'approver-kubeconfig',
  'token',
  'join-command',
  'user-data',
  'ca-rotation',
  'node',
  'tpm',
  'records',
] as const;
export type Command = (typeof COMMANDS)[number];
/** The cluster admin's commands that make bootstrap tokens: they run on the admin's machine, not on a node. */
export const ADMIN_COMMANDS: readonly Command[] = ['token', 'join-command', 'user-data'];
/** Commands that need no node name of their own (tpm reads only the machine's TPM). */
export const CLUSTER_COMMANDS: readonly Command[] = [
  ...ADMIN_COMMANDS,
  'approver',
  'approver-kubeconfig',
  'ca-rotation',
  'node',
  'records',
  'tpm',
];

export const COMMAND_FLAGS: readonly CommandFlagSpec[] = [
  {
    flag: 'output',
    commands: ['status', 'token', 'ca-rotation', 'node', 'tpm'],
    values: ['text', 'json'],
    metavar: 'text|json',
    help: 'status, token, ca-rotation status, node list, tpm identify: output format',
  },
  {
    flag: 'signer-ca-hash',
    commands: ['ca-rotation'],
    metavar: 'sha256:HEX',
    help: 'ca-rotation publish: the CA the cluster signer now issues under (its pin); nodes then re-issue every certificate under it',
  },
  {
    flag: 'ca-key',
    commands: ['ca-rotation'],
    metavar: 'PATH',
    help: 'ca-rotation publish, retire: the private key of a CA the nodes trust now (kubeadm: /etc/kubernetes/pki/ca.key); signs what is published, read once, never written or logged',
  },
  {
    flag: 'valid-for',
    commands: ['ca-rotation'],
    metavar: 'DURATION',
    help: 'ca-rotation publish, retire: how long nodes accept the signed change (default 168h); a node that looks later waits for a newer one',
  },
  {
    flag: 'drop-join-ca',
    commands: ['ca-rotation'],
    type: 'bool',
    metavar: '',
    help: 'ca-rotation publish: publish a bundle without the CA your join commands pin (every join command and user-data made before then fails)',
  },
  {
    flag: 'skip-node',
    commands: ['ca-rotation'],
    type: 'repeated',
    metavar: 'NAME',
    help: 'ca-rotation retire: retire without waiting for this Node (repeatable; gone, broken or lying in its annotation); it may be cut off',
  },
  {
    flag: 'identity',
    commands: ['renew', 'wait'],
    values: ['kubelet', 'kube-proxy', 'kubelet-serving'],
    metavar: 'NAME',
    help: 'renew, wait: only this identity (kubelet, kube-proxy, kubelet-serving)',
  },
  {
    flag: 'timeout',
    commands: ['wait'],
    metavar: 'DURATION',
    help: 'wait: give up with exit 4 after this long (default: wait as long as it takes)',
  },
  {
    flag: 'kubeconfig',
    commands: [...ADMIN_COMMANDS, 'approver-kubeconfig', 'approver', 'ca-rotation', 'node', 'records'],
    metavar: 'PATH',
    help: 'token, join-command, user-data, approver-kubeconfig, ca-rotation, node, records: the admin kubeconfig (default: the first file in KUBECONFIG, else ~/.kube/config); approver: its own kubeconfig, as approver.kubeconfig',
  },
  {
    flag: 'ttl',
    commands: [...ADMIN_COMMANDS, 'approver-kubeconfig'],
    metavar: 'DURATION',
    help: 'token create, --create-token: lifetime of the new token (default 1h; 0 only with --no-expiry)',
  },
  {
    flag: 'expiry',
    commands: ADMIN_COMMANDS,
    type: 'bool',
    metavar: '',
    usage: '--no-expiry',
    help: 'token create, --create-token: --no-expiry makes a token that never expires (the tokencleaner never removes it)',
  },
  {
    flag: 'usages',
    commands: ADMIN_COMMANDS,
    type: 'strings',
    metavar: 'USAGE',
    help: 'token create, --create-token: authentication and/or signing, comma-separated or repeated (default both; signing lets discovery check cluster-info)',
  },
  {
    flag: 'groups',
    commands: ADMIN_COMMANDS,
    type: 'strings',
    metavar: 'GROUP',
    help: 'token create, --create-token: extra groups, each starting with system:bootstrappers:, comma-separated or repeated',
  },
  {
    flag: 'description',
    commands: ADMIN_COMMANDS,
    metavar: 'TEXT',
    help: 'token create, --create-token: a description stored with the token',
  },
  {
    flag: 'node',
    commands: ADMIN_COMMANDS,
    metavar: 'NAME',
    help: 'token create, --create-token: bind the new token to this one node: kubeboot approver issues it only the kubelet identity system:node:NAME, once (a live Node of that name needs kubeboot node replace NAME --old-machine-gone first)',
  },
  {
    flag: 'pool',
    commands: ADMIN_COMMANDS,
    metavar: 'PREFIX',
    help: 'token create, --create-token: bind the new token to node names starting with PREFIX (an autoscaling group), each name issued once, at most --max-nodes of them',
  },
  {
    flag: 'max-nodes',
    commands: ADMIN_COMMANDS,
    metavar: 'N',
    help: 'token create, --create-token: with --pool (required): how many nodes the token may join',
  },
  {
    flag: 'reason',
    commands: ['node'],
    metavar: 'TEXT',
    help: 'node revoke: why, recorded with the revocation and in the message of the CSRs it denies',
  },
  {
    flag: 'delete-node',
    commands: ['node'],
    type: 'bool',
    metavar: '',
    help: 'node revoke: also delete the Node object',
  },
  {
    flag: 'for-token',
    commands: ['node'],
    metavar: 'ID',
    help: 'node replace: the bootstrap token whose CSR may claim the mark (default: the next token create --node NAME)',
  },
  {
    flag: 'old-machine-gone',
    commands: ['node'],
    type: 'bool',
    metavar: '',
    help: "node replace: required; the machine being replaced is gone (wiped disk, terminated instance). Its kubelet key would otherwise keep renewing as system:node:NAME beside the new machine's: give a machine that may still run a new name and revoke the old one",
  },
  {
    flag: 'dry-run',
    commands: ['records'],
    type: 'bool',
    metavar: '',
    help: 'records migrate: print what would be moved, write nothing',
  },
  {
    flag: 'create-token',
    commands: ['join-command', 'user-data'],
    type: 'bool',
    metavar: '',
    help: 'join-command, user-data: create a new bootstrap token (as token create) instead of --token',
  },
  {
    flag: 'set',
    commands: ['user-data'],
    type: 'repeated',
    metavar: 'KEY=VALUE',
    help: 'user-data: a config-file setting for the node (file key as in the table, e.g. kubeProxy.enabled=false; repeatable)',
  },
  {
    flag: 'format',
    commands: ['user-data'],
    values: ['cloud-config', 'script'],
    metavar: 'cloud-config|script',
    help: 'user-data: cloud-init #cloud-config (default) or a plain shell script for images without cloud-init',
  },
  {
    flag: 'repo-url',
    commands: ['user-data'],
    metavar: 'URL',
    help: "user-data: the package repository holding kubeboot (from npm run repo); without it the image's repositories must have it",
  },
  {
    flag: 'repo-key',
    commands: ['user-data'],
    metavar: 'PATH',
    help: "user-data: the repository's ASCII-armored public signing key (the only key trusted for it); required with --repo-url",
  },
  {
    flag: 'unsafe-unsigned-repo',
    commands: ['user-data'],
    type: 'bool',
    metavar: '',
    help: 'user-data: accept a --repo-url without --repo-key: the nodes then check no signature (apt trusted=yes, yum gpgcheck=0) (unsafe)',
  },
  {
    flag: 'repo-type',
    commands: ['user-data'],
    values: ['apt', 'yum'],
    metavar: 'apt|yum',
    help: "user-data: the node's package manager (default apt)",
  },
  {
    flag: 'repo-suite',
    commands: ['user-data'],
    metavar: 'NAME',
    help: 'user-data: apt suite of --repo-url (default stable; component main)',
  },
  {
    flag: 'output-file',
    commands: ['user-data'],
    metavar: 'PATH',
    help: 'user-data: write the user-data to this file instead of stdout (0600, atomically: it holds the token)',
  },
  {
    flag: 'ek-ca',
    commands: ['tpm'],
    metavar: 'FILE',
    help: "tpm identify: PEM certificates of the CAs that issue EK certificates (the TPM vendor's, or a hypervisor's swtpm local CA); says whether one of them issued this TPM's, exit 1 if none did",
  },
  {
    flag: 'tpm-ek',
    commands: ['node'],
    metavar: 'HASH',
    help: "node enroll: the node's TPM endorsement key, as kubeboot tpm identify prints it (ek-sha256)",
  },
  {
    flag: 'tpm-ak',
    commands: ['node'],
    metavar: 'NAME',
    help: "node enroll: the TPM name of the node's attestation key, as kubeboot tpm identify prints it (ak-name); its kubelet client CSRs then need a quote by it",
  },
  {
    flag: 'from-file',
    commands: ['node'],
    metavar: 'FILE',
    help: 'node enroll: many nodes, one `NAME ek-sha256: HASH` or `NAME ak-name: NAME` line each (kubeboot tpm identify output prefixed with the name)',
  },
  {
    flag: 'tpm-swtpm-tcp',
    commands: ['tpm'],
    metavar: '127.0.0.1:PORT',
    help: 'tpm: for tests only: talk to a software TPM (swtpm socket --server type=tcp) on this loopback address instead of /dev/tpmrm0',
  },
];

export function readKey(config: Config, key: ConfigKey): unknown {
  let node: unknown = config;
  for (const part of key.split('.')) node = (node as Record<string, unknown>)[part];
  return node;
}

export function defaultText(spec: OptionSpec): string {
  if (spec.defaultText !== undefined) return spec.defaultText;
  if (spec.key === 'configFile') return DEFAULT_CONFIG_FILE;
  const value = readKey(defaultConfig('node'), spec.key);
  if (value === null) return spec.type === 'listen' ? 'off' : 'unset';
  if (spec.type === 'duration' && typeof value === 'number') return formatDuration(value);
  if (Array.isArray(value)) return value.length === 0 ? 'none' : value.map((v) => String(v)).join(', ');
  return String(value);
}

export function flagUsage(spec: OptionSpec): string {
  if (spec.type === 'bool') return `--[no-]${spec.flag}`;
  if (spec.type === 'enum') return `--${spec.flag} ${(spec.values ?? []).join('|')}`;
  return `--${spec.flag} ${spec.metavar}`;
}

export function commandFlagUsage(c: CommandFlagSpec): string {
  return c.usage ?? (c.type === 'bool' ? `--${c.flag}` : `--${c.flag} ${c.metavar}`);
}

/** The options part of `kubeboot --help`. */
export function renderOptionsHelp(): string {
  const lines: string[] = ['Options (config file < KUBEBOOT_* environment < flags):'];
  for (const spec of OPTIONS.filter((o) => o.flag !== null)) {
    lines.push(`  ${flagUsage(spec)}`);
    lines.push(`      ${spec.help}.`);
    const where = [spec.env !== null ? `env ${spec.env}` : null, spec.inFile ? `file ${spec.key}` : null];
    lines.push(`      ${where.filter((w) => w !== null).join(', ')}; default ${defaultText(spec)}`);
  }
  lines.push('', 'Config file only:');
  for (const spec of OPTIONS.filter((o) => o.flag === null)) {
    lines.push(`  ${spec.key}: [[argv...], ...]`, `      ${spec.help}.`);
  }
  lines.push('', 'Command options:');
  for (const c of COMMAND_FLAGS) lines.push(`  ${commandFlagUsage(c)}`, `      ${c.help}.`);
  lines.push('', 'Durations are seconds or like 90s, 15m, 2h30m. Lists in the environment are comma-separated.');
  return lines.join('\n') + '\n';
}

/** Markdown table for the configuration reference in docs/reference.md. */
export function renderOptionsReference(): string {
  const rows = OPTIONS.map((spec) => {
    const cells = [
      spec.inFile ? `\`${spec.key}\`` : '',
      spec.flag !== null ? `\`${flagUsage(spec)}\`` : '',
      spec.env !== null ? `\`${spec.env}\`` : '',
      defaultText(spec),
      spec.help,
    ];
    return `| ${cells.map((c) => c.replaceAll('|', '\\|')).join(' | ')} |`;
  });
  return ['| File key | Flag | Environment | Default | Meaning |', '|---|---|---|---|---|', ...rows].join('\n') + '\n';
}
