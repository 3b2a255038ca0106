// Version skew: an older real kubelet, built alone by `build.sh --kubelet`
// (KUBEBOOT_K8S_VERSION), joins the default plane on kubeboot's credentials
// and follows kubeboot's renewals. Kubernetes' skew policy lets a kubelet be
// up to three minors older than the API server.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Test } from 'tap';
import type { KubeObject } from './admin.js';
import { auditEventsFrom, joinRealNode, requestSpans } from './node-join.js';
import { waitKubeletUsesRenewal, waitNodeReady, watchKubeletLink } from './rotation.js';

const buildScript = fileURLToPath(new URL('../controlplane/build.sh', import.meta.url));
const built = new Map<string, Promise<string>>();

/** The kubelet of Kubernetes `version`, built once per machine into .cache/k8s/v<version>/. */
export function olderKubelet(version: string): Promise<string> {
  let p = built.get(version);
  if (!p) {
    p = new Promise<string>((resolve, reject) => {
      const child = execFile(
        'bash',
        [buildScript, '--kubelet'],
        { maxBuffer: 16 << 20, env: { ...process.env, KUBEBOOT_K8S_VERSION: version } },
        (err, out) => (err ? reject(err) : resolve(join(out.trim().split('\n').at(-1) ?? '', 'kubelet'))),
      );
      child.stderr?.pipe(process.stderr);
    });
    built.set(version, p);
  }
  return p;
}

/**
 * The kubelet of `version` joins (the Node registers as system:node:<n>
 * reporting that version, turns Ready) and moves to a certificate kubeboot
 * renewed, without a 401. 7-minute certificates: kubeboot renews each after
 * 1 minute, the kubelet notices a changed file within 5 (client-go's reload).
 */
export async function olderKubeletJoinsAndRenews(t: Test, version: string): Promise<void> {
  const kubelet = await olderKubelet(version);
  const name = `skew-${version.replaceAll('.', '-')}`;
  const joined = await joinRealNode(t, name, {
    plane: { signingDuration: '7m' },
    kubeboot: { kubeProxy: { enabled: false } },
    kubeletBinary: kubelet,
  });
  const { plane, net, node, layout } = joined;
  const link = watchKubeletLink(layout.kubeletCertDir, name);
  t.teardown(() => link.stop());
  await waitNodeReady(plane, name, [node.kubelet, node.fakecri]);
  const n = (await plane.admin.getNode(name)) as KubeObject;
  t.equal(n.status.nodeInfo.kubeletVersion, `v${version}`, `the Node runs kubelet v${version}`);
  const created = auditEventsFrom(plane, net.nodeIp, 'kubelet/').find(
    (e) => e.verb === 'create' && e.objectRef?.resource === 'nodes' && e.responseStatus?.code === 201,
  );
  t.equal(created?.user?.username, `system:node:${name}`, 'it registered as system:node:<n>, with the certificate kubeboot obtained');

  const renewed = await waitKubeletUsesRenewal(joined, link, `kubelet v${version} to use a certificate kubeboot renewed`);
  t.ok(
    renewed,
    `kubelet v${version} authenticates with a certificate kubeboot renewed (on the link since ${new Date(renewed.seenAt).toISOString()})`,
  );
  t.same(link.problems, [], 'the link only ever pointed at the node’s certificate and key');
  const requests = requestSpans(auditEventsFrom(plane, net.nodeIp, 'kubelet/'));
  t.same(
    requests
      .filter((r) => r.event.responseStatus?.code === 401)
      .map((r) => `${r.event.requestReceivedTimestamp} ${r.event.verb} ${r.event.requestURI}`),
    [],
    `no request of kubelet v${version} was answered 401 (${requests.length} requests)`,
  );
  const ready = ((await plane.admin.getNode(name))?.status?.conditions ?? []).find((c: { type: string }) => c.type === 'Ready');
  t.equal(ready?.status, 'True', 'the Node is still Ready');
  await joined.stop();
}
