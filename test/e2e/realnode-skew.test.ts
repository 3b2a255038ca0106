// Version skew: an older real kubelet joins the plane's release on kubeboot's
// credentials and moves to a certificate kubeboot renewed. By default the
// kubelet three minors older than the plane (v1.31.14 against 1.34.4; the
// skew policy's limit); KUBEBOOT_SKEW_KUBELETS=1.33.13,1.31.14 runs each
// listed release in turn. Each kubelet is built alone (build.sh --kubelet)
// on first use: on 2 cores 6–9 minutes from empty caches, 3–8 with the
// plane's build cache warm, 8 s once built (docs/testing.md), which is why
// CI runs one. Cost of the test: about 5.5 minutes of wall time per release,
// mostly the kubelet's 5-minute reload.
import t from 'tap';
import { realNodeOrSkip } from '../support/node-join.js';
import { olderKubeletJoinsAndRenews } from '../support/skew.js';

const versions = (process.env.KUBEBOOT_SKEW_KUBELETS ?? '1.31.14')
  .split(',')
  .map((v) => v.trim().replace(/^v/, ''))
  .filter(Boolean);
const bad = versions.find((v) => !/^\d+\.\d+\.\d+$/.test(v));
if (bad !== undefined) throw new Error(`KUBEBOOT_SKEW_KUBELETS: expected releases like 1.31.14, comma-separated; got ${bad}`);
t.setTimeout(versions.length * 45 * 60_000);

if (await realNodeOrSkip(t)) {
  for (const version of versions) t.test(`kubelet v${version} joins and follows a renewal`, (t) => olderKubeletJoinsAndRenews(t, version));
}
