// Version skew: the real kubelet v1.31.14, three minors older than the plane's API
// server (the skew policy allows up to three), joins on kubeboot's credentials
// and moves to a certificate kubeboot renewed. The kubelet is built alone
// (build.sh --kubelet) on first use. Cost: about 6 minutes of wall time,
// mostly the kubelet's 5-minute reload; the first run adds its build
// (docs/testing.md).
import t from 'tap';
import { realNodeOrSkip } from '../support/node-join.js';
import { olderKubeletJoinsAndRenews } from '../support/skew.js';

t.setTimeout(60 * 60_000);

if (await realNodeOrSkip(t)) {
  t.test('kubelet v1.31.14 joins and follows a renewal', (t) => olderKubeletJoinsAndRenews(t, '1.31.14'));
}
