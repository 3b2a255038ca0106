// The Helm chart packaging/helm/kubeboot-approver/ with the real helm (built
// from the Go module proxy by test/helm/build.sh on first use): `helm lint`;
// `helm template` compared object by object with `kubectl kustomize` of the
// base and its two overlays (and with packaging/monitoring's PrometheusRule),
// after dropping only Helm's own labels; then `helm install` and
// `helm upgrade` on a real control plane, and the approver run as the
// chart's Deployment would run it (its args as the API server stored them,
// its ServiceAccount's token) approving a node's kubelet client renewal, its
// requests classed by the chart's FlowSchema. No kubelet here: the pods
// themselves never run (approver-image.test.ts runs the image).
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual, promisify } from 'node:util';
import t from 'tap';
import { parseAllDocuments, stringify } from 'yaml';
import type { KubeObject } from '../support/admin.js';
import { approvals, CSRS, createNode, nodeClient, startApprover, submitCsr } from '../support/approver.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { expectStatus, kubeClient } from '../support/http.js';
import { writeKubeconfig } from '../support/kubeconfig.js';
import { assertNoSecrets, forbid } from '../support/kubeboot.js';
import { flowSchemaInEffect, manifestsDir } from '../support/manifests.js';
import { freePort } from '../support/processes.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../', import.meta.url));
const chart = join(root, 'packaging/helm/kubeboot-approver');
const monitoring = join(root, 'packaging/monitoring');
const RELEASE = 'kubeboot-approver';
/** The labels Helm's objects carry and the kustomize base's do not. */
const HELM_LABELS = ['app.kubernetes.io/managed-by', 'app.kubernetes.io/instance', 'helm.sh/chart'];

/** helm from .cache/helm, built on first use; undefined (the suite skips, loudly) without Go unless CI. */
async function helmOrSkip(): Promise<string | undefined> {
  try {
    const child = run('bash', [join(root, 'test/helm/build.sh')], { maxBuffer: 16 << 20 });
    child.child.stderr?.pipe(process.stderr);
    return (await child).stdout.trim().split('\n').at(-1);
  } catch (err) {
    if ((err as { code?: number }).code !== 127 || process.env.CI === 'true') throw err;
    const reason = 'SKIPPED: no Go toolchain on PATH and no helm built (run test/helm/build.sh); the Helm chart tests did NOT run';
    process.stderr.write(`\n${'!'.repeat(100)}\n!!! ${reason}\n${'!'.repeat(100)}\n\n`);
    t.plan(0, reason);
    return undefined;
  }
}

const objects = (text: string): KubeObject[] =>
  parseAllDocuments(text)
    .map((d) => d.toJS() as KubeObject | null)
    .filter((o): o is KubeObject => o !== null);
const key = (o: KubeObject) => `${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`;
function withoutHelmLabels(o: KubeObject): KubeObject {
  const copy = structuredClone(o);
  const labels = copy.metadata.labels as Record<string, string> | undefined;
  for (const l of HELM_LABELS) delete labels?.[l];
  return copy;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
/** Where two values differ, as JSON paths with both sides. */
function paths(a: unknown, b: unknown, at = ''): string[] {
  if (isDeepStrictEqual(a, b)) return [];
  if (!isObject(a) || !isObject(b)) return [`${at || '.'}: ${JSON.stringify(a)} in the chart, ${JSON.stringify(b)} expected`];
  return [...new Set([...Object.keys(a), ...Object.keys(b)])].flatMap((k) => paths(a[k], b[k], `${at}.${k}`));
}

/** Every difference between two renderings, one line each: objects only on one side, then objects that differ. */
function differences(chartObjects: KubeObject[], expected: KubeObject[]): string[] {
  const a = new Map(chartObjects.map((o) => [key(o), withoutHelmLabels(o)]));
  const b = new Map(expected.map((o) => [key(o), o]));
  const out: string[] = [];
  for (const k of a.keys()) if (!b.has(k)) out.push(`only in the chart: ${k}`);
  for (const k of b.keys()) if (!a.has(k)) out.push(`missing from the chart: ${k}`);
  for (const [k, o] of a) {
    const other = b.get(k);
    if (other) out.push(...paths(o, other).map((p) => `differs: ${k}: ${p}`));
  }
  return out;
}

const helm = await helmOrSkip();
const plane = helm ? await controlPlaneOrSkip(t, { name: 'helm-chart', kubeletApprover: false }) : undefined;
if (helm && plane) {
  const dir = await mkdtemp(join(tmpdir(), 'kubeboot-helm-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const kubeconfig = ['--kubeconfig', plane.adminKubeconfig];
  const helmRun = async (args: string[]) =>
    (
      await run(helm, args, {
        env: {
          ...process.env,
          HELM_CACHE_HOME: join(dir, 'cache'),
          HELM_CONFIG_HOME: join(dir, 'config'),
          HELM_DATA_HOME: join(dir, 'data'),
        },
      })
    ).stdout;
  const template = async (...set: string[]) =>
    objects(await helmRun(['template', RELEASE, chart, '--namespace', 'kube-system', ...set.flatMap((s) => ['--set', s])]));
  const kustomize = async (overlay: string) => objects((await run(plane.kubectlPath!, ['kustomize', join(manifestsDir, overlay)])).stdout);

  t.test('helm lint passes, strict', async (t) => {
    t.match(await helmRun(['lint', '--strict', chart]), /1 chart\(s\) linted, 0 chart\(s\) failed/);
  });

  t.test('helm template renders the kustomize base and its overlays object by object', async (t) => {
    t.same(differences(await template(), await kustomize('approver')), [], 'defaults: the base');
    t.same(
      differences(await template('approveKubeletServing=true'), await kustomize('approver-kubelet-serving')),
      [],
      'approveKubeletServing: the kubelet-serving overlay',
    );
    t.same(
      differences(await template('metricsAuth.enabled=true'), await kustomize('approver-metrics-auth')),
      [],
      'metricsAuth.enabled: the metrics-auth overlay (kube-rbac-proxy)',
    );
    const base = await kustomize('approver');
    const withRule = await template('prometheusRule.enabled=true');
    const shipped = objects(readFileSync(join(monitoring, 'prometheusrule.yaml'), 'utf8'));
    t.same(differences(withRule, [...base, ...shipped]), [], 'prometheusRule.enabled: packaging/monitoring/prometheusrule.yaml');
    t.equal(
      readFileSync(join(chart, 'files/kubeboot.rules.yaml'), 'utf8'),
      readFileSync(join(monitoring, 'kubeboot.rules.yaml'), 'utf8'),
      "the chart's copy of kubeboot.rules.yaml is the shipped one (cp packaging/monitoring/kubeboot.rules.yaml packaging/helm/kubeboot-approver/files/)",
    );
    // The comparison can fail: a changed value is a difference it names.
    t.match(differences(await template('replicas=3'), base), [/^differs: Deployment\/kube-system\/kubeboot-approver: /]);
    t.same(
      differences(await template('flowSchema.enabled=false'), base).sort(),
      [
        'missing from the chart: FlowSchema//kubeboot-approver',
        'missing from the chart: FlowSchema//kubeboot-approver-leader-election',
        'missing from the chart: PriorityLevelConfiguration//kubeboot-approver',
      ],
      'flowSchema.enabled=false: no FlowSchema, no level',
    );
    // At 250 or less, kubeboot-approver would take the Lease requests before kubeboot-approver-leader-election.
    await t.rejects(
      template('flowSchema.matchingPrecedence=250'),
      /flowSchema\.matchingPrecedence must be above 250/,
      'flowSchema.matchingPrecedence=250: refused',
    );
    t.same(
      differences(await template('flowSchema.matchingPrecedence=251'), base),
      ['differs: FlowSchema//kubeboot-approver: .spec.matchingPrecedence: 251 in the chart, 750 expected'],
      'flowSchema.matchingPrecedence=251: kubeboot-approver moves, its Lease schema stays',
    );
  });

  t.test('helm install, helm upgrade, and the approver as the chart deploys it approves a node', async (t) => {
    const installed = await helmRun(['install', RELEASE, chart, '--namespace', 'kube-system', ...kubeconfig]);
    t.match(installed, /STATUS: deployed/);
    const get = async (path: string) => expectStatus(await plane.admin.request<KubeObject>('GET', path), `GET ${path}`, 200).body;
    const deploymentPath = '/apis/apps/v1/namespaces/kube-system/deployments/kubeboot-approver';
    const first = await get(deploymentPath);
    t.equal((first.metadata.labels as Record<string, string>)['app.kubernetes.io/managed-by'], 'Helm', 'the Deployment is Helm-managed');
    t.equal(first.spec.replicas, 2);
    await get('/apis/policy/v1/namespaces/kube-system/poddisruptionbudgets/kubeboot-approver');
    await get('/apis/rbac.authorization.k8s.io/v1/clusterroles/kubeboot:approver');
    await get('/api/v1/namespaces/kubeboot');

    const upgraded = await helmRun([
      'upgrade',
      RELEASE,
      chart,
      '--namespace',
      'kube-system',
      '--set',
      'approveKubeletServing=true',
      '--set',
      'replicas=3',
      ...kubeconfig,
    ]);
    t.match(upgraded, /REVISION: 2/);
    const deployment = await get(deploymentPath);
    t.equal(deployment.spec.replicas, 3, 'the upgrade changed replicas');
    const container = deployment.spec.template.spec.containers[0];
    t.ok((container.args as string[]).includes('--approve-kubelet-serving'), 'and the args');
    t.ok(Number(deployment.metadata.generation) > Number(first.metadata.generation), 'the Deployment was updated in place');

    // The Deployment's pod, without a kubelet: its args as stored, its ServiceAccount's token.
    const token = expectStatus(
      await plane.admin.request<KubeObject>('POST', '/api/v1/namespaces/kube-system/serviceaccounts/kubeboot-approver/token', {
        apiVersion: 'authentication.k8s.io/v1',
        kind: 'TokenRequest',
        spec: { expirationSeconds: 3600 },
      }),
      'TokenRequest for kubeboot-approver',
      201,
    ).body.status.token as string;
    forbid(token);
    const saKubeconfig = join(dir, 'sa.conf');
    await writeKubeconfig(saKubeconfig, plane.server, { pem: plane.caPem }, { token });
    const port = await freePort();
    const [command, ...args] = (container.args as string[]).map((a) => a.replace('$(POD_IP):10272', `127.0.0.1:${port}`));
    t.equal(command, 'approver');
    const config = join(dir, 'approver.yaml');
    await writeFile(config, stringify({ approver: { kubeconfig: saKubeconfig } }));
    // startApprover adds --approver-listen off and fast leader election; the Deployment's listener comes after and wins.
    const running = startApprover(config, args);
    t.teardown(async () => {
      running.child.kill('SIGTERM');
      await running.done;
    });
    await running.waitForOutput(/became the leader/, 60_000);
    t.notMatch(running.output(), /KUBELET CLIENT APPROVAL IS OFF/, 'kubelet client approval is on');

    // A node renews its kubelet client certificate: approved by this approver alone.
    await createNode(plane, 'helm-node');
    const node = await nodeClient(plane, 'helm-node');
    const csr = await submitCsr(node, {
      cn: 'system:node:helm-node',
      o: ['system:nodes'],
      signer: 'kubernetes.io/kube-apiserver-client-kubelet',
      usages: ['digital signature', 'client auth'],
      name: 'helm-node-renewal',
    });
    const approved = await plane.admin.waitFor(
      `CSR ${csr} approved`,
      async () => {
        const found = approvals(await plane.admin.getCsr(csr));
        return found.length > 0 ? found : undefined;
      },
      60_000,
    );
    t.equal(approved[0]?.reason, 'KubebootApprover', 'by kubeboot approver');
    await node.close();

    // Its requests are classed by the chart's FlowSchema, into the chart's priority level; its Lease's into the stock leader-election.
    const flowcontrol = '/apis/flowcontrol.apiserver.k8s.io/v1';
    const flowSchema = await get(`${flowcontrol}/flowschemas/kubeboot-approver`);
    const level = await get(`${flowcontrol}/prioritylevelconfigurations/kubeboot-approver`);
    const leaderElection = await get(`${flowcontrol}/prioritylevelconfigurations/leader-election`);
    // The ServiceAccount's Lease requests are the stock system-leader-election's (every kube-system ServiceAccount's), the user's the chart's.
    const stockLeaseSchema = await get(`${flowcontrol}/flowschemas/system-leader-election`);
    const userLeaseSchema = await get(`${flowcontrol}/flowschemas/kubeboot-approver-leader-election`);
    for (const name of ['kubeboot-approver', 'kubeboot-approver-leader-election']) await flowSchemaInEffect(plane.admin, name);
    // The ServiceAccount (the Deployment) and the user kubeboot:approver (kubeboot-approver.service) alike.
    const asUser = await plane.mintClientCert({ commonName: 'kubeboot:approver' });
    for (const [who, client, leaseSchema] of [
      ['the ServiceAccount', kubeClient({ server: plane.server, caPem: plane.caPem, token }), stockLeaseSchema],
      ['the user kubeboot:approver', kubeClient({ server: plane.server, caPem: plane.caPem, ...asUser }), userLeaseSchema],
    ] as const) {
      const res = await client.request('GET', `${CSRS}?limit=1`);
      const lease = await client.request('GET', '/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kubeboot-approver');
      await client.close();
      t.equal(res.status, 200, `${who} lists CSRs`);
      t.equal(res.headers['x-kubernetes-pf-flowschema-uid'], flowSchema.metadata.uid, `${who}: FlowSchema kubeboot-approver`);
      t.equal(res.headers['x-kubernetes-pf-prioritylevel-uid'], level.metadata.uid, `${who}: PriorityLevelConfiguration kubeboot-approver`);
      t.equal(lease.status, 200, `${who} reads the Lease`);
      t.equal(
        lease.headers['x-kubernetes-pf-flowschema-uid'],
        leaseSchema.metadata.uid,
        `${who}'s Lease get: FlowSchema ${leaseSchema.metadata.name}`,
      );
      t.equal(lease.headers['x-kubernetes-pf-prioritylevel-uid'], leaderElection.metadata.uid, `${who}'s Lease get: leader-election`);
    }
    assertNoSecrets(t, running.output(), 'approver');
  });
}
