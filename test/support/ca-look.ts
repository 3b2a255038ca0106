// The look a CA step hands the daemon when nothing is pending (trust/keeper.ts CaLook),
// for the tests of the schedule, the daemon and the look's decisions.
import type { CaLook } from '../../agent/trust/keeper.js';

/** A look due at `at`, standing in for the keeper until `until`, over cluster-info digest `d1`. */
export function caLookAt(at: Date, until: Date): CaLook {
  return {
    url: 'https://127.0.0.1:6443/api/v1/namespaces/kube-public/configmaps/cluster-info?resourceVersion=0',
    caPem: 'CA',
    tlsServerName: null,
    certFile: '/var/lib/kubelet/pki/kubelet-client-current.pem',
    keyFile: '/var/lib/kubelet/pki/kubelet-client-current.pem',
    digest: 'd1',
    at: at.toISOString(),
    until: until.toISOString(),
  };
}
