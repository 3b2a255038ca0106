/** Defaults follow kubeadm and kubelet conventions. */
import { KEY_ALGORITHMS, SHORT_LIVED_SECONDS } from '../identity.js';
import type { Config } from './types.js';

export const DEFAULT_CONFIG_FILE = '/etc/kubeboot/config.yaml';
// 10271: not a port any Kubernetes component uses (10250, 10256, 10257, 10258, 10259 are taken).
export const DEFAULT_LISTEN = '127.0.0.1:10271';
// The approver may run next to the node daemon on a control-plane node.
export const DEFAULT_APPROVER_LISTEN = '127.0.0.1:10272';

export function defaultConfig(nodeName: string): Config {
  return {
    configFile: DEFAULT_CONFIG_FILE,
    bootstrapKubeconfig: '/etc/kubernetes/bootstrap-kubelet.conf',
    stateDir: '/var/lib/kubeboot',
    nodeName,
    keyAlgorithm: 'ecdsa-p256',
    tpm: 'off',
    expirationSeconds: null,
    server: null,
    token: null,
    tokenFile: null,
    caCertHashes: [],
    unsafeSkipCaVerification: false,
    unsafeAllowInsecureBootstrap: false,
    kubelet: {
      kubeconfig: '/etc/kubernetes/kubelet.conf',
      certDir: '/var/lib/kubelet/pki',
      hooks: [],
      renewal: 'auto',
      // kubeadm's path for the kubelet's configuration file.
      configFile: '/var/lib/kubelet/config.yaml',
    },
    kubeProxy: {
      enabled: true,
      kubeconfig: '/etc/kubernetes/kube-proxy.conf',
      certDir: '/var/lib/kube-proxy/pki',
      commonName: 'system:kube-proxy',
      organizations: [],
      signerName: 'kubernetes.io/kube-apiserver-client',
      hooks: [],
    },
    kubeletServing: {
      enabled: false,
      certDir: '/var/lib/kubelet/pki',
      dnsNames: [],
      ipAddresses: [],
      hooks: [],
    },
    waitTimeout: 900,
    pendingNoticeInterval: 60,
    renewal: { margin: 0, reuseKey: false, hookTimeout: 60 },
    caRotation: {
      enabled: true,
      interval: 600,
      clientCaFile: null,
      restartWindow: 900,
      reissueWindow: 3600,
      // try-restart: a unit that is not running stays stopped.
      kubeletRestart: [['systemctl', 'try-restart', 'kubelet.service']],
      kubeProxyRestart: [['systemctl', 'try-restart', 'kube-proxy.service']],
    },
    listen: DEFAULT_LISTEN,
    log: { level: 'info', format: 'auto' },
    // Where cloud-init 22.4 keeps the user-data it was given (checked on a
    // booted Debian 12): instances/<id>/ (through the `instance` link:
    // user-data.txt, user-data.txt.i, cloud-config.txt, obj.pkl), a script's
    // part-NNN under scripts/, and the NoCloud seed itself.
    cloudInitPaths: [
      '/var/lib/cloud/instance',
      '/var/lib/cloud/instance/scripts',
      '/var/lib/cloud/seed/nocloud',
      '/var/lib/cloud/seed/nocloud-net',
    ],
    approver: {
      kubeconfig: '/etc/kubeboot/approver.conf',
      listen: DEFAULT_APPROVER_LISTEN,
      leaseNamespace: 'kube-system',
      leaseName: 'kubeboot-approver',
      // client-go's leader-election defaults.
      leaseDuration: 15,
      renewDeadline: 10,
      retryPeriod: 2,
      resyncPeriod: 60,
      // retain.ts MAX_PENDING_PER_REQUESTER: a pool of 1,000 nodes joining at once fits.
      maxPendingPerRequester: '4Mi',
      // One year: kube-controller-manager's default --cluster-signing-duration.
      maxExpiration: 365 * 24 * 3600,
      maxProxyServingExpiration: SHORT_LIVED_SECONDS,
      keyAlgorithms: [...KEY_ALGORITHMS],
      kubeletServing: false,
      // On: the shipped RBAC leaves kubelet client approval to this approver alone.
      kubeletClient: true,
      unsafeApproveUnboundTokens: false,
      protectNodes: [],
      inventory: false,
      tpmPcr7: [],
      servingDnsSuffixes: [],
      servingIpCidrs: [],
      denyViolations: false,
    },
  };
}
