// The image from `npm run image`, run the way the shipped kustomize base runs
// it: the Deployment's args, user and securityContext, under podman with runc
// on the host network (read-only root, no capabilities, no new privileges,
// its memory limit), the ServiceAccount token from the TokenRequest API
// mounted at /var/run/secrets/kubernetes.io/serviceaccount and
// KUBERNETES_SERVICE_HOST/PORT set, so the in-cluster configuration is what
// connects. It must take the Lease and approve a node's kube-proxy CSR
// against the real control plane. The base and its kubelet-serving overlay
// (and the metrics-auth one, a kube-rbac-proxy sidecar) are dry-run against
// that API server; `kubectl apply -f` of the directory
// still creates only the RBAC. Then every metric the shipped alerting rules
// read is looked for in what this approver and a running `kubeboot run` serve.
import { chownSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { request } from 'undici';
import t from 'tap';
import type { KubeObject } from '../support/admin.js';
import { approvals, approveKubeletCsrOf, createNode, KUBE_PROXY, nodeClient, submitCsr } from '../support/approver.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { expectStatus } from '../support/http.js';
import { assertNoSecrets, forbid, handToken, nodeLayout, startKubeboot, startWatched } from '../support/kubeboot.js';
import { manifestsDir } from '../support/manifests.js';
import { freePort } from '../support/processes.js';
import { metricsUsedByRules } from '../packaging/fixtures/alerts.js';
import { buildImage, imageArchive, privatePodman } from '../packaging/fixtures/image.js';
import { output, run, toolsOrSkip, version } from '../packaging/fixtures/packages.js';

const SA_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';
const UID = 65532;

if (toolsOrSkip(t, ['podman', 'runc', 'tar', 'gzip', 'dpkg-deb', 'apt-get'], true)) {
  // The image's approver takes the Lease: the plane runs none of its own.
  const plane = await controlPlaneOrSkip(t, { name: 'approver-image', kubeletApprover: false });
  if (plane) {
    buildImage();
    const podman = privatePodman(t);
    const image = `localhost/kubeboot:${version}`;
    output('podman', podman(['pull', '--quiet', `oci-archive:${imageArchive()}:${version}`]));
    output('podman', podman(['tag', `localhost/${version}:latest`, image]));

    const kubectl = (args: string[]) => output(plane.kubectlPath!, ['--kubeconfig', plane.adminKubeconfig, ...args]);
    const render = (dir: string) => parseAllDocuments(kubectl(['kustomize', join(manifestsDir, dir)])).map((d) => d.toJS() as KubeObject);
    const base = render('approver');
    const deployment = base.find((o) => o.kind === 'Deployment')!;
    const pod = deployment.spec.template.spec;
    const container = pod.containers[0];

    // `kubectl apply -f` of the directory, as the systemd unit's users do: the RBAC only, for real.
    const applied = kubectl(['apply', '-f', join(manifestsDir, 'approver')]);
    const tokenRequest = await plane.admin.request<KubeObject>(
      'POST',
      '/api/v1/namespaces/kube-system/serviceaccounts/kubeboot-approver/token',
      {
        apiVersion: 'authentication.k8s.io/v1',
        kind: 'TokenRequest',
        spec: { expirationSeconds: 3600 },
      },
    );
    const token = expectStatus(tokenRequest, 'TokenRequest for kubeboot-approver', 201).body.status.token as string;
    forbid(token);
    const sa = join(t.testdir(), 'serviceaccount');
    mkdirSync(sa, { recursive: true, mode: 0o755 });
    writeFileSync(join(sa, 'token'), token, { mode: 0o600 });
    writeFileSync(join(sa, 'ca.crt'), plane.caPem, { mode: 0o644 });
    writeFileSync(join(sa, 'namespace'), 'kube-system', { mode: 0o644 });
    // Readable by the pod's user only, as with a projected volume and fsGroup.
    chownSync(join(sa, 'token'), UID, UID);

    const apiPort = new URL(plane.server).port;
    const listen = await freePort();
    const name = `kubeboot-approver-${process.pid}`;
    // The Deployment's container, as podman flags: what the pod's securityContext and limits ask of runc.
    const user = `${pod.securityContext.runAsUser}:${pod.securityContext.runAsGroup}`;
    const sc = container.securityContext;
    const args = (container.args as string[]).map((a) => a.replace('$(POD_IP):10272', `127.0.0.1:${listen}`));
    const approver = startWatched(
      'podman',
      podman([
        'run',
        '--rm',
        '--name',
        name,
        '--hostname',
        name,
        '--network',
        'host',
        ...(sc.readOnlyRootFilesystem ? ['--read-only', '--read-only-tmpfs=false'] : []),
        ...(sc.capabilities.drop.includes('ALL') ? ['--cap-drop=ALL'] : []),
        ...(sc.allowPrivilegeEscalation === false ? ['--security-opt', 'no-new-privileges'] : []),
        '--memory',
        `${parseInt(container.resources.limits.memory, 10)}m`,
        '--user',
        user,
        '--ulimit',
        'nofile=4096:4096',
        '--ulimit',
        'nproc=512:512',
        '-e',
        'KUBERNETES_SERVICE_HOST=127.0.0.1',
        '-e',
        `KUBERNETES_SERVICE_PORT=${apiPort}`,
        '-v',
        `${sa}:${SA_DIR}:ro`,
        image,
        ...args,
        '--lease-duration=4s',
        '--renew-deadline=3s',
        '--retry-period=1s',
      ]),
      { PATH: process.env.PATH },
    );
    t.teardown(async () => {
      if (approver.child.exitCode === null) {
        output('podman', podman(['stop', '--time', '10', name]));
        await approver.done;
      }
    });
    const fetchFrom = async (port: number, path: string) => {
      const res = await request(`http://127.0.0.1:${port}${path}`);
      return { status: res.statusCode, body: await res.body.text() };
    };
    const get = (path: string) => fetchFrom(listen, path);
    let approverMetrics = '';

    // Every await of the setup is above, before the first assertion or subtest.
    t.test('kubectl apply -f of the base directory still creates only the RBAC', async (t) => {
      t.notMatch(applied, /deployment|poddisruptionbudget/i, 'no Deployment, no PodDisruptionBudget');
      t.match(applied, /serviceaccount\/kubeboot-approver created/, 'the ServiceAccount');
      t.match(applied, /clusterrole.rbac.authorization.k8s.io\/kubeboot:approver created/, 'the ClusterRole');
    });

    t.test('the kustomize base and the kubelet-serving overlay pass a server-side dry run', async (t) => {
      for (const dir of ['approver', 'approver-kubelet-serving', 'approver-metrics-auth']) {
        const r = run(plane.kubectlPath!, [
          '--kubeconfig',
          plane.adminKubeconfig,
          'apply',
          '-k',
          join(manifestsDir, dir),
          '--dry-run=server',
        ]);
        t.equal(r.status, 0, `kubectl apply -k ${dir} --dry-run=server\n${r.stderr}`);
        t.match(r.stdout, /deployment.apps\/kubeboot-approver created \(server dry run\)/, `${dir}: the Deployment is accepted`);
        t.match(
          r.stdout,
          /poddisruptionbudget.policy\/kubeboot-approver created \(server dry run\)/,
          `${dir}: the PodDisruptionBudget is accepted`,
        );
      }
      t.equal(deployment.spec.replicas, 2, 'two replicas');
      t.equal(pod.securityContext.runAsUser, UID, "runs as the image's user");
      t.equal(
        container.image,
        `registry.invalid/kubeboot:${version}`,
        'the image of this version, from a registry that never resolves until an overlay names yours',
      );
      t.equal(pod.serviceAccountName, 'kubeboot-approver', 'the ServiceAccount the RBAC binds');
      t.ok(
        base.some((o) => o.kind === 'ServiceAccount' && o.metadata.name === pod.serviceAccountName),
        'which the base creates',
      );
      t.same(
        pod.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.labelSelector.matchLabels,
        deployment.spec.selector.matchLabels,
        'replicas spread over nodes',
      );
      const pdb = base.find((o) => o.kind === 'PodDisruptionBudget')!;
      t.same(pdb.spec.selector.matchLabels, deployment.spec.selector.matchLabels, 'the PodDisruptionBudget covers the Deployment');
      t.equal(pdb.spec.minAvailable, 1);
      t.match(container.args, ['approver', '--approver-listen=$(POD_IP):10272'], 'listens on the pod IP');
      t.same(container.env[0], { name: 'POD_IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } });
      t.notOk(container.args.includes('--approve-kubelet-serving'), 'the base approves no serving certificates');
      const overlay = render('approver-kubelet-serving').find((o) => o.kind === 'Deployment')!;
      t.same(
        overlay.spec.template.spec.containers[0].args,
        [...container.args, '--approve-kubelet-serving'],
        'the overlay adds exactly --approve-kubelet-serving',
      );
    });

    t.test('the metrics-auth overlay puts /metrics behind kube-rbac-proxy and keeps the probes working', async (t) => {
      const rendered = render('approver-metrics-auth');
      const [approverC, proxy] = rendered.find((o) => o.kind === 'Deployment')!.spec.template.spec.containers;
      const listen = (approverC.args as string[]).find((a) => a.startsWith('--approver-listen='))!.split('=')[1]!;
      t.match(listen, /^127\.0\.0\.1:/, 'the approver listens inside the pod only');
      t.notOk(approverC.ports, 'and publishes no port');
      t.equal(proxy.name, 'kube-rbac-proxy');
      t.ok(proxy.args.includes(`--upstream=http://${listen}/`), 'the sidecar proxies to that listener');
      const port = Number(
        (proxy.args as string[])
          .find((a) => a.startsWith('--secure-listen-address='))!
          .split(':')
          .pop(),
      );
      for (const probe of ['livenessProbe', 'readinessProbe']) {
        t.match(approverC[probe].httpGet, { port, scheme: 'HTTPS' }, `${probe} goes through the sidecar's TLS port`);
        t.ok(
          (proxy.args as string[]).some(
            (a) => a.startsWith('--ignore-paths=') && a.split('=')[1]!.split(',').includes(approverC[probe].httpGet.path),
          ),
          `${probe}: its path needs no token`,
        );
      }
      t.notOk(
        (proxy.args as string[]).some((a) => /--ignore-paths=.*\/metrics/.test(a)),
        '/metrics does',
      );
      const reader = rendered.find((o) => o.kind === 'ClusterRole' && o.metadata.name === 'kubeboot:metrics-reader')!;
      t.same(reader.rules, [{ nonResourceURLs: ['/metrics'], verbs: ['get'] }], 'a ClusterRole to grant scrapers');
      const authn = rendered.find((o) => o.kind === 'ClusterRoleBinding' && o.metadata.name === 'kubeboot:approver-metrics-auth')!;
      t.same(
        authn.subjects,
        [{ kind: 'ServiceAccount', name: 'kubeboot-approver', namespace: 'kube-system' }],
        "the sidecar may review tokens as the pod's ServiceAccount",
      );
    });

    t.test(
      "starts with the Deployment's args as 65532, no capabilities, a read-only root, connected through the in-cluster configuration",
      async (t) => {
        await approver.waitForOutput(/became the leader/, 120_000);
        t.match(approver.output(), `"api":"in-cluster (${SA_DIR})"`, 'the in-cluster configuration connected it, not a kubeconfig');
        const inspect = JSON.parse(output('podman', podman(['inspect', name])))[0];
        const status = readFileSync(`/proc/${inspect.State.Pid}/status`, 'utf8');
        t.match(status, new RegExp(`^Uid:\\s+${UID}\\s+${UID}\\s+${UID}\\s+${UID}$`, 'm'), `the process runs as ${UID}`);
        t.match(status, /^CapEff:\s+0000000000000000$/m, 'with no effective capabilities');
        t.match(status, /^CapBnd:\s+0000000000000000$/m, 'and none it could gain');
        t.match(status, /^NoNewPrivs:\s+1$/m, 'no new privileges');
        const rootMount = readFileSync(`/proc/${inspect.State.Pid}/mountinfo`, 'utf8')
          .split('\n')
          .find((l) => l.split(' ')[4] === '/');
        t.match(rootMount?.split(' ')[5], /^ro\b/, 'the root filesystem is mounted read-only');
        const lease = (
          await plane.admin.request<KubeObject>('GET', '/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kubeboot-approver')
        ).body;
        t.match(lease.spec.holderIdentity, new RegExp(`^${name}_`), 'the container holds the Lease');
        const ready = await get('/readyz');
        t.equal(ready.status, 200, '/readyz');
        t.match(ready.body, /leader: yes/, 'and leads');
        t.comment(`container approver RSS: ${/^VmRSS:\s+(\d+ kB)/m.exec(status)?.[1]} (idle, leader)`);
      },
    );

    t.test("approves a node's kube-proxy CSR", async (t) => {
      await createNode(plane, 'image-node');
      const node = await nodeClient(plane, 'image-node');
      const csr = await submitCsr(node, { cn: KUBE_PROXY.cn, name: 'image-kube-proxy' });
      const issued = await plane.admin.waitFor(
        `CSR ${csr} issued`,
        async () => {
          const c = await plane.admin.getCsr(csr);
          return c?.status?.certificate ? c : undefined;
        },
        60_000,
      );
      const [approval] = approvals(issued);
      t.equal(approval?.reason, 'KubebootApprover', 'approved by kubeboot');
      t.match(approval?.message, /kube-proxy-client: every rule passed/, 'every rule passed');
      t.match(approver.output(), new RegExp(`"csr":"${csr}"`), 'the container logged the decision');
      const metrics = (await get('/metrics')).body;
      approverMetrics = metrics;
      t.match(
        metrics,
        /kubeboot_approver_decisions_total\{signer="kubernetes.io\/kube-apiserver-client",decision="approved",rule="kube-proxy-client"\} 1/,
        'counted',
      );
      const pid = JSON.parse(output('podman', podman(['inspect', name])))[0].State.Pid;
      t.comment(`container approver peak RSS: ${/^VmHWM:\s+(\d+ kB)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]}`);
      await node.close();
    });

    t.test('podman stop: SIGTERM releases the Lease and exits 0; nothing secret in the log', async (t) => {
      output('podman', podman(['stop', '--time', '10', name]));
      const done = await approver.done;
      t.equal(done.code, 0, 'exit 0');
      t.match(done.stdout + done.stderr, /released the lease/, 'released the lease');
      assertNoSecrets(t, done.stdout + done.stderr, 'the container approver');
    });

    t.test('every metric the alerting rules read is served by the approver or by a running daemon', async (t) => {
      // The approver is stopped: this node's kube-proxy CSR stays pending, as the pending-CSR alert needs.
      const port = await freePort();
      // Its own directory, removed only once the daemon is gone: tap's testdir
      // is removed before teardowns run, while the daemon still writes there.
      const dir = mkdtempSync(join(tmpdir(), 'kubeboot-metrics-node-'));
      const node = await nodeLayout(dir, 'metrics-node', { kubeProxy: { enabled: true }, listen: `127.0.0.1:${port}` });
      const token = await handToken(plane, node);
      const daemon = startKubeboot(['run', '--config', node.config]);
      t.teardown(async () => {
        if (daemon.child.exitCode === null && daemon.child.signalCode === null) daemon.child.kill('SIGKILL');
        await daemon.done;
        rmSync(dir, { recursive: true, force: true });
      });
      // No approver runs now (the plane has none of its own here): the admin approves the kubelet's CSR.
      await approveKubeletCsrOf(plane, `system:bootstrap:${token.id}`, 120_000);
      const pendingSeries = /^kubeboot_csr_pending_since_timestamp_seconds\{identity="kube-proxy"\} (\S+)$/m;
      const daemonMetrics = await plane.admin.waitFor(
        'the daemon reporting its pending kube-proxy CSR',
        async () => {
          const text = (await fetchFrom(port, '/metrics').catch(() => ({ body: '' }))).body;
          return pendingSeries.test(text) && /^kubeboot_renewals_total\{identity="kubelet"\} 1$/m.test(text) ? text : undefined;
        },
        120_000,
      );
      const since = Number(pendingSeries.exec(daemonMetrics)![1]);
      t.ok(Math.abs(since - Date.now() / 1000) < 120, `the pending CSR's creation time is now (${since})`);
      const served = new Set(
        [...`${daemonMetrics}\n${approverMetrics}`.matchAll(/^# TYPE (\S+) (\S+)$/gm)].flatMap(([, name, type]) =>
          type === 'histogram' ? [`${name}_bucket`, `${name}_sum`, `${name}_count`] : [name!],
        ),
      );
      const used = metricsUsedByRules();
      t.ok(used.length > 0, `the rules read ${used.join(', ')}`);
      for (const name of used) t.ok(served.has(name), `${name} is served`);
      // Stopped here, bounded, so a daemon that ignores SIGTERM fails this test instead of hanging it.
      daemon.child.kill('SIGTERM');
      const killer = setTimeout(() => daemon.child.kill('SIGKILL'), 30_000);
      const stopped = await daemon.done;
      clearTimeout(killer);
      t.equal(
        stopped.code,
        0,
        `kubeboot run exits 0 on SIGTERM with its CSR pending\n${stopped.signal === 'SIGKILL' ? stopped.stderr.slice(-4000) : ''}`,
      );
      assertNoSecrets(t, daemon.output(), 'kubeboot run');
    });
  }
}
