// A real node joins on kubeboot's credentials: the real kubelet and
// kube-proxy of the control plane's release, in the node's own network
// namespace (the kubelet also in a private mount namespace), the container
// runtime an in-memory fake. The Node registers as system:node:<n> and turns
// Ready, a pod bound to it runs, kube-proxy is healthy and has programmed its
// rules, and the host is left as it was.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { promisify } from 'node:util';
import t from 'tap';
import { request } from 'undici';
import type { KubeObject } from '../support/admin.js';
import { expectStatus } from '../support/http.js';
import { snapshotHost } from '../support/netns.js';
import { auditEventsFrom, joinRealNode, realNodeOrSkip, waitForIdentity } from '../support/node-join.js';

const run = promisify(execFile);
const NAME = 'realnode-join';

if (await realNodeOrSkip(t)) {
  t.test('the real kubelet and kube-proxy run on the credentials kubeboot wrote, and leave the host as it was', async (t) => {
    const joined = await joinRealNode(t, NAME, { servingBootstrap: true });
    const { plane, net, node, layout } = joined;
    t.comment(`kubelet credential on disk ${joined.credentialMs} ms after kubeboot run started`);

    const kubeletStarted = Date.now();
    const ready = await plane.admin.waitFor(
      'the Node to turn Ready',
      async () => {
        if (node.kubelet.exited !== undefined) throw new Error(`the kubelet exited (${node.kubelet.exited}); see ${node.kubelet.logFile}`);
        const n = await plane.admin.getNode(NAME);
        const cond = (n?.status?.conditions ?? []).find((c: { type: string }) => c.type === 'Ready');
        return cond?.status === 'True' ? n : undefined;
      },
      180_000,
    );
    const readyAt = Date.now();
    t.comment(
      `Node Ready ${readyAt - kubeletStarted} ms after the kubelet started, ${readyAt - joined.startedAt} ms after kubeboot run started`,
    );
    t.ok(ready, 'the Node is Ready');
    t.same(
      (ready as KubeObject).status.addresses.find((a: { type: string }) => a.type === 'InternalIP')?.address,
      net.nodeIp,
      "its InternalIP is the node's namespace address",
    );

    const created = auditEventsFrom(plane, net.nodeIp, 'kubelet/').find(
      (e) => e.verb === 'create' && e.objectRef?.resource === 'nodes' && e.responseStatus?.code === 201,
    );
    t.equal(
      created?.user?.username,
      `system:node:${NAME}`,
      'the Node was created by system:node:<n>, with the certificate kubeboot obtained',
    );
    // NodeRestriction holds for the credential kubeboot wrote: its own Node only.
    const kubectl = (...args: string[]) =>
      run(plane.kubectlPath!, ['--kubeconfig', layout.kubeletKubeconfig, ...args]).then(
        () => 'ok',
        (e: Error) => e.message,
      );
    expectStatus(
      await plane.admin.request('POST', '/api/v1/nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name: 'someone-else' } }),
      'create another Node',
      201,
    );
    t.equal(await kubectl('label', 'node', NAME, 'kubeboot.test/by-node=yes'), 'ok', 'the node may label its own Node');
    t.match(await kubectl('label', 'node', 'someone-else', 'kubeboot.test/by-node=yes'), /forbidden/i, 'but not another Node');

    // The apiserver reaches the kubelet over TLS verified against the cluster CA
    // (--kubelet-certificate-authority): only with the serving certificate the
    // kubelet asked for itself, approved by kubeboot approver.
    const serving = await plane.admin.waitFor(
      "the kubelet's serving CSR, issued",
      async () =>
        (await plane.admin.listCsrs()).find(
          (c: KubeObject) =>
            c.spec.signerName === 'kubernetes.io/kubelet-serving' && c.spec.username === `system:node:${NAME}` && c.status?.certificate,
        ),
      120_000,
    );
    t.match(
      serving.status.conditions.find((c: { type: string }) => c.type === 'Approved'),
      { reason: 'KubebootApprover' },
      'approved by kubeboot approver',
    );
    const kubeletHealthz = await plane.admin.waitFor(
      "the kubelet's /healthz through the apiserver",
      async () => {
        const res = await plane.admin.request('GET', `/api/v1/nodes/${NAME}/proxy/healthz`);
        return res.status === 200 ? res.body : undefined;
      },
      60_000,
    );
    t.equal(kubeletHealthz, 'ok', "GET /api/v1/nodes/<n>/proxy/healthz: the apiserver verified the kubelet's serving certificate");

    // A pod bound to the node (there is no scheduler) runs there.
    expectStatus(
      await plane.admin.request('POST', '/api/v1/namespaces/default/serviceaccounts', {
        apiVersion: 'v1',
        kind: 'ServiceAccount',
        metadata: { name: 'default' },
      }),
      'create the default ServiceAccount',
      201,
      409,
    );
    const pod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'on-the-real-node' },
      spec: {
        nodeName: NAME,
        automountServiceAccountToken: false,
        containers: [{ name: 'c', image: 'registry.invalid/kubeboot/pause:1' }],
      },
    };
    expectStatus(await plane.admin.request('POST', '/api/v1/namespaces/default/pods', pod), 'create the pod', 201);
    const running = await plane.admin.waitFor(
      'the pod to run',
      async () => {
        const p = (await plane.admin.request<KubeObject>('GET', '/api/v1/namespaces/default/pods/on-the-real-node')).body;
        return p.status?.phase === 'Running' ? p : undefined;
      },
      120_000,
    );
    t.equal(running.status.containerStatuses?.[0]?.ready, true, 'its container is ready');

    // kube-proxy, after `kubeboot wait --identity kube-proxy` (its CSR needed the approver, and the Node).
    await waitForIdentity(t, layout, 'kube-proxy');
    const proxy = await node.startKubeProxy();
    const healthz = await plane.admin.waitFor(
      'kube-proxy /healthz to say healthy',
      async () => {
        if (proxy.exited !== undefined) throw new Error(`kube-proxy exited (${proxy.exited}); see ${proxy.logFile}`);
        const res = await request(`http://${net.nodeIp}:10256/healthz`);
        const body = await res.body.text();
        return res.statusCode === 200 ? body : undefined;
      },
      120_000,
    );
    t.match(JSON.parse(healthz), { nodeEligible: true }, `kube-proxy /healthz is 200: ${healthz.trim()}`);
    const service = {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'on-the-real-node' },
      spec: { selector: { app: 'none' }, ports: [{ port: 80 }] },
    };
    const clusterIp = expectStatus(
      await plane.admin.request<KubeObject>('POST', '/api/v1/namespaces/default/services', service),
      'create a Service',
      201,
    ).body.spec.clusterIP as string;
    const nft = () =>
      run('nsenter', [`--net=${net.path}`, '--', 'nft', 'list', 'table', 'ip', 'kube-proxy']).then(
        (r) => r.stdout,
        () => '',
      );
    const rules = await plane.admin.waitFor(
      `kube-proxy to program Service ${clusterIp}`,
      async () => {
        const table = await nft();
        return table.includes(clusterIp) ? table : undefined;
      },
      60_000,
    );
    t.match(
      rules,
      /chain services/,
      `kube-proxy programmed the Service's ClusterIP ${clusterIp} into its nftables table, in the node's namespace`,
    );
    const proxyEvents = auditEventsFrom(plane, net.nodeIp, 'kube-proxy/');
    t.ok(
      proxyEvents.some(
        (e) => e.user?.username === 'system:kube-proxy' && e.objectRef?.resource === 'services' && e.responseStatus?.code === 200,
      ),
      'kube-proxy lists Services as system:kube-proxy',
    );

    for (const [agent, who] of [
      ['kubelet/', 'the kubelet'],
      ['kube-proxy/', 'kube-proxy'],
    ] as const) {
      const denied = auditEventsFrom(plane, net.nodeIp, agent).filter(
        (e) => e.responseStatus?.code === 401 || e.responseStatus?.code === 403,
      );
      t.same(
        denied.map((e) => `${e.responseStatus?.code} ${e.verb} ${e.requestURI}`),
        [],
        `no request of ${who} was refused`,
      );
    }
    // matches the kubelet's defaults: its Lease in kube-node-lease, renewed every 10 s.
    const lease = await plane.admin.waitFor(
      'a renewal of the Node Lease',
      async () =>
        auditEventsFrom(plane, net.nodeIp, 'kubelet/').find(
          (e) => e.verb === 'update' && e.objectRef?.resource === 'leases' && e.objectRef.name === NAME && e.responseStatus?.code === 200,
        ),
      60_000,
    );
    t.equal(lease.user?.username, `system:node:${NAME}`, 'the kubelet renews its Lease as the node');
    t.notOk(existsSync(layout.bootstrapKubeconfig), 'the bootstrap kubeconfig is gone once both identities are proven');

    const varWrites = node.varWrites();
    const privateSysctls = node.privateSysctls();
    await joined.stop();
    const after = await snapshotHost();
    t.same(after.sysctls, joined.hostBefore.sysctls, 'the host sysctls are unchanged');
    t.equal(after.netfilter, joined.hostBefore.netfilter, "the host's netfilter ruleset is unchanged");
    t.same(after.varPaths, joined.hostBefore.varPaths, "no kubelet or kube-proxy directory appeared in the host's /var");
    t.ok(
      varWrites.includes('lib/kubelet/device-plugins') && varWrites.includes('log/containers'),
      `the kubelet did write to /var, into the overlay: ${varWrites.filter((p) => p.split('/').length <= 3).join(', ')}`,
    );
    const changed = Object.entries(privateSysctls).filter(([k, v]) => v !== joined.hostBefore.sysctls[k]);
    t.ok(
      changed.length > 0,
      `the kubelet did set sysctls, in its private files: ${changed.map(([k, v]) => `${k}=${v} (host ${joined.hostBefore.sysctls[k]})`).join(', ')}`,
    );
  });
}
