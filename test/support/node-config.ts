/**
 * A node's configuration with every path inside one test directory, for the
 * unit tests that run the daemon's pieces on a real file system: no status
 * listener, a one-minute CSR wait, and the CA rotation's own loop off (it is
 * driven in test/unit/trust/keeper.test.ts).
 */
import { join } from 'node:path';
import { defaultConfig } from '../../agent/config/defaults.js';
import type { Config } from '../../agent/config/types.js';

export function configIn(dir: string, nodeName = 'n1'): Config {
  const config = defaultConfig(nodeName);
  Object.assign(config, {
    bootstrapKubeconfig: join(dir, 'bootstrap-kubelet.conf'),
    stateDir: join(dir, 'state'),
    listen: null,
    waitTimeout: 60,
  });
  config.caRotation = { ...config.caRotation, enabled: false };
  config.kubelet = { ...config.kubelet, kubeconfig: join(dir, 'kubelet.conf'), certDir: join(dir, 'kubelet-pki') };
  config.kubeProxy = { ...config.kubeProxy, kubeconfig: join(dir, 'kube-proxy.conf'), certDir: join(dir, 'proxy-pki') };
  config.kubeletServing = { ...config.kubeletServing, certDir: join(dir, 'kubelet-pki') };
  return config;
}
