/**
 * The resolved configuration: config file < KUBEBOOT_* environment < flags.
 * Every duration is in seconds. Paths are absolute after loading.
 */
import type { KeyAlgorithm, IdentityName, KubeletRenewalMode } from '../identity.js';

export interface Config {
  /** File the settings were read from (may not exist; then only defaults/env/flags apply). */
  configFile: string;
  bootstrapKubeconfig: string;
  stateDir: string;
  nodeName: string;
  keyAlgorithm: KeyAlgorithm;
  /**
   * `off`, `device` (/dev/tpmrm0) or `swtpm:127.0.0.1:PORT` (tests only):
   * with a TPM every kubelet client CSR carries a quote by the machine's AK
   * (tpm/csr-evidence.ts), which the approver's tpm-attested rule requires
   * of a TPM-enrolled name.
   */
  tpm: string;
  /** spec.expirationSeconds to request; null lets the signer decide. At least 600. */
  expirationSeconds: number | null;
  /** Join without a bootstrap kubeconfig: API server URL, token (or a file holding it). */
  server: string | null;
  token: string | null;
  tokenFile: string | null;
  /** `sha256:<64 hex>` pins for CA discovery through kube-public/cluster-info. */
  caCertHashes: string[];
  unsafeSkipCaVerification: boolean;
  /** Permits `insecure-skip-tls-verify: true` in the bootstrap kubeconfig. */
  unsafeAllowInsecureBootstrap: boolean;
  kubelet: {
    kubeconfig: string;
    certDir: string;
    hooks: string[][];
    /** Who renews the kubelet client certificate: the kubelet's config file decides (auto), kubeboot, or the kubelet. */
    renewal: KubeletRenewalMode;
    /** The kubelet's KubeletConfiguration file, read for rotateCertificates. */
    configFile: string;
  };
  kubeProxy: {
    enabled: boolean;
    kubeconfig: string;
    certDir: string;
    commonName: string;
    organizations: string[];
    signerName: string;
    hooks: string[][];
  };
  kubeletServing: {
    enabled: boolean;
    certDir: string;
    dnsNames: string[];
    ipAddresses: string[];
    hooks: string[][];
  };
  /** Give up waiting for a CSR after this long (bootstrap exits 4). */
  waitTimeout: number;
  /** While a CSR is pending longer than this, log the approve command once per this interval. */
  pendingNoticeInterval: number;
  renewal: {
    /** Renew when less than this much lifetime remains, even before the 70–90 % point. */
    margin: number;
    reuseKey: boolean;
    hookTimeout: number;
  };
  /** Cluster CA rotation: the node follows the bundle published in kube-public/cluster-info. */
  caRotation: {
    enabled: boolean;
    /** Look at the published bundle this often (jittered ±20 %), and after every renewal. */
    interval: number;
    /** The kubelet's authentication.x509.clientCAFile, kept equal to the bundle; null leaves it alone. */
    clientCaFile: string | null;
    /** Restarts of the kubelet and kube-proxy after a bundle change are spread over this window. */
    restartWindow: number;
    /** Early re-issue under the signer's new CA is spread over this window. */
    reissueWindow: number;
    kubeletRestart: string[][];
    kubeProxyRestart: string[][];
  };
  /** Address:port for /healthz, /readyz and /metrics; null disables the listener. */
  listen: string | null;
  log: { level: 'error' | 'warn' | 'info' | 'debug'; format: 'json' | 'text' | 'journal' | 'auto' };
  /** cloud-init caches checked for a leftover copy of the bootstrap token. */
  cloudInitPaths: string[];
  /** `kubeboot approver` only (cluster side). The kube-proxy subject it requires is kubeProxy.commonName/organizations. */
  approver: {
    kubeconfig: string;
    listen: string | null;
    leaseNamespace: string;
    leaseName: string;
    leaseDuration: number;
    renewDeadline: number;
    retryPeriod: number;
    resyncPeriod: number;
    /** Bytes, as `4Mi` (values.ts parseByteSize). */
    maxPendingPerRequester: string;
    maxExpiration: number;
    /** kube-proxy client and kubelet serving CSRs must set spec.expirationSeconds, at most this. */
    maxProxyServingExpiration: number;
    keyAlgorithms: string[];
    kubeletServing: boolean;
    kubeletClient: boolean;
    unsafeApproveUnboundTokens: boolean;
    protectNodes: string[];
    inventory: boolean;
    /** --tpm-pcr7, `PREFIX=SHA256` each (tpm/pcr-policy.ts). */
    tpmPcr7: string[];
    servingDnsSuffixes: string[];
    servingIpCidrs: string[];
    denyViolations: boolean;
  };
}

export type { IdentityName };
