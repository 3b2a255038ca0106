// The node side of a CA rotation (trust/keeper.ts) against undici's
// MockAgent and a fake clock: what it writes, whom it restarts and when,
// what it refuses, and when it re-issues. The node's files are in memory
// (memoryStore), except in the one test of the files on disk (their modes,
// each replaced whole). No sleeps, no control plane; the real control plane
// proves the same in test/e2e/ca-rotation.test.ts.
import { createPrivateKey } from 'node:crypto';
import { mkdir, readdir, stat } from 'node:fs/promises';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import t, { type Test } from 'tap';
import { MockAgent } from 'undici';
import { defaultConfig } from '../../../agent/config/defaults.js';
import { identitiesFor } from '../../../agent/config/identities.js';
import { createMetrics, type KubebootMetrics } from '../../../agent/daemon/metrics.js';
import { applyMetric, forwardingMetrics } from '../../../agent/daemon/worker-protocol.js';
import type { Config } from '../../../agent/config/types.js';
import { assessNode, isNodeCredential, type NodeCredential } from '../../../agent/credential/assess.js';
import type { IdentityName } from '../../../agent/identity.js';
import { parseClientKubeconfig } from '../../../agent/kubeconfig/parse.js';
import { renderIdentityKubeconfig } from '../../../agent/kubeconfig/render.js';
import { createLogger } from '../../../agent/log.js';
import { pemBlocks } from '../../../agent/pki/pem.js';
import { fileStore, type Store } from '../../../agent/store/store.js';
import { FakeClock } from '../../support/fake-time.js';
import { trustedBundle } from '../../../agent/trust/bundle.js';
import { spreadOffset } from '../../../agent/trust/decide.js';
import { serializer } from '../../../agent/store/serializer.js';
import { seedFloor } from '../../../agent/trust/floor.js';
import { TrustKeeper } from '../../../agent/trust/keeper.js';
import { nextStatement, signStatement } from '../../../agent/trust/statement.js';
import { clusterInfoKubeconfig } from '../../support/kubeconfig.js';
import { memoryStore } from '../../support/memory-store.js';
import { createCa, issueLeaf, type CertAndKey } from '../../support/pki.js';

const SERVER = 'https://api.test:6443';
const logger = createLogger({ level: 'error', format: 'json' });
const ca1 = await createCa('ca-1');
const ca2 = await createCa('ca-2');
const servingOf = async (ca: CertAndKey) =>
  pemBlocks((await issueLeaf(ca, { commonName: 'kube-apiserver', usage: 'server', dnsNames: ['api.test'] })).certPem)[0]!.der;
const serving1 = await servingOf(ca1);
const serving2 = await servingOf(ca2);

interface Fixture {
  config: Config;
  /** The node's files: in memory, or on disk with `onDisk`. */
  store: Store;
  keeper: TrustKeeper;
  clock: FakeClock;
  metrics: KubebootMetrics;
  /**
   * What the cluster publishes; change it between checks. Signed as `kubeboot ca-rotation publish --ca-key`
   * signs it, by CA 1 unless `signer` says otherwise (null: unsigned), a new version for each new content.
   */
  published: { caPem: string; signerPin?: string; signer?: CertAndKey | null };
  /** What the API server presents, and whether nodes may write cluster-info. */
  server: { presented: Uint8Array; nodeCanWrite: boolean; user: string; nodeExists?: boolean };
  restarts: string[];
  reissued: IdentityName[];
  annotations: Record<string, unknown>[];
  events: Record<string, unknown>[];
}

/** `reuse`: a second kubeboot on the same node's files (a restart of the daemon); `onDisk`: the files in a test directory, through `onDisk`. */
async function fixture(
  t: Test,
  o: { kubeletCa?: CertAndKey; trusted?: string; reuse?: Fixture; server?: string; onDisk?: Store } = {},
): Promise<Fixture> {
  const dir = o.reuse ? join(o.reuse.config.stateDir, '..') : o.onDisk ? t.testdir() : '/node';
  const store = o.reuse?.store ?? o.onDisk ?? memoryStore();
  const config = defaultConfig('n1');
  Object.assign(config, { bootstrapKubeconfig: join(dir, 'bootstrap.conf'), stateDir: join(dir, 'state'), listen: null });
  config.kubelet = { ...config.kubelet, kubeconfig: join(dir, 'kubelet.conf'), certDir: join(dir, 'kubelet-pki') };
  config.kubeProxy = { ...config.kubeProxy, enabled: false };
  config.caRotation = {
    ...config.caRotation,
    clientCaFile: join(dir, 'client-ca.crt'),
    kubeletRestart: [['restart', 'kubelet']],
    kubeProxyRestart: [['restart', 'kube-proxy']],
  };
  const kubelet = identitiesFor(config)[0]!;
  if (o.reuse) return withKeeper(t, config, store, o.reuse.clock, false);
  if (o.onDisk) {
    await mkdir(config.stateDir, { recursive: true });
    await mkdir(kubelet.certDir, { recursive: true });
  }
  const leaf = await issueLeaf(o.kubeletCa ?? ca1, { commonName: 'system:node:n1', organizations: ['system:nodes'], usage: 'client' });
  await store.update(kubelet, leaf.certPem, leaf.keyPem, new Date());
  await store.write(
    config.kubelet.kubeconfig,
    renderIdentityKubeconfig(kubelet, { server: o.server ?? SERVER, caPem: o.trusted ?? ca1.certPem }),
  );
  return withKeeper(t, config, store, new FakeClock(new Date()), o.server !== undefined);
}

/** `network`: real connections instead of the MockAgent. */
async function withKeeper(t: Test, config: Config, store: Store, clock: FakeClock, network: boolean): Promise<Fixture> {
  const f: Fixture = {
    config,
    store,
    keeper: undefined as unknown as TrustKeeper,
    clock,
    metrics: createMetrics({ certificates: () => [], processMetrics: false }),
    published: { caPem: ca1.certPem },
    server: { presented: serving1, nodeCanWrite: false, user: 'system:node:n1' },
    restarts: [],
    reissued: [],
    annotations: [],
    events: [],
  };
  const agent = new MockAgent();
  agent.disableNetConnect();
  t.teardown(() => agent.close());
  const pool = agent.get(SERVER);
  pool
    .intercept({ path: (p) => p.startsWith('/api/v1/namespaces/kube-public/configmaps/cluster-info'), method: 'GET' })
    .reply(() => ({
      statusCode: 200,
      data: JSON.stringify({
        kind: 'ConfigMap',
        metadata: {
          name: 'cluster-info',
          annotations: f.published.signerPin ? { 'kubeboot.io/signer-ca-hash': f.published.signerPin } : {},
        },
        data: { kubeconfig: clusterInfoKubeconfig(SERVER, f.published.caPem), ...statementOf(f) },
      }),
    }))
    .persist();
  pool
    .intercept({ path: '/apis/authentication.k8s.io/v1/selfsubjectreviews', method: 'POST' })
    .reply(() => ({
      statusCode: 201,
      data: JSON.stringify({ status: { userInfo: { username: f.server.user, groups: ['system:nodes'] } } }),
    }))
    .persist();
  pool
    .intercept({ path: '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews', method: 'POST' })
    .reply(() => ({ statusCode: 201, data: JSON.stringify({ status: { allowed: f.server.nodeCanWrite } }) }))
    .persist();
  pool
    .intercept({ path: '/api/v1/namespaces/default/events', method: 'POST' })
    .reply((opts) => {
      f.events.push(JSON.parse(String(opts.body)) as Record<string, unknown>);
      return { statusCode: 201, data: '{}' };
    })
    .persist();
  pool
    .intercept({ path: '/api/v1/nodes/n1', method: 'PATCH' })
    .reply((opts) => {
      if (f.server.nodeExists === false)
        return { statusCode: 404, data: JSON.stringify({ kind: 'Status', code: 404, reason: 'NotFound' }) };
      const patch = JSON.parse(String(opts.body)) as { metadata: { annotations: Record<string, string> } };
      f.annotations.push(JSON.parse(patch.metadata.annotations['kubeboot.io/ca-rotation']!) as Record<string, unknown>);
      return { statusCode: 200, data: JSON.stringify({ kind: 'Node', metadata: { name: 'n1' } }) };
    })
    .persist();

  // The daemon hands over the kubelet credential it last saw valid; here: what is on disk at each check.
  let latest: NodeCredential | null = null;
  const keeper = new TrustKeeper({
    config: () => config,
    logger,
    clock: f.clock,
    random: () => 0.5,
    signal: new AbortController().signal,
    dispatcher: network ? undefined : agent,
    nodeCredential: () => latest,
    serialize: serializer(),
    reissue: (identity) => f.reissued.push(identity),
    runCommands: async (argvs) => {
      f.restarts.push(...argvs.map((a) => a.join(' ')));
      return true;
    },
    store,
    metrics: f.metrics,
    presented: async () => [f.server.presented],
  });
  const check = keeper.check.bind(keeper);
  keeper.check = async () => {
    const a = (await assessNode(config, f.clock.now(), undefined, store)).kubelet;
    if (!isNodeCredential(a)) throw new Error(`kubelet credential not usable: ${a.state === 'unusable' ? a.reason : ''}`);
    latest = a;
    return check();
  };
  f.keeper = keeper;
  return f;
}

const versions = new Map<string, number>();
/** The signed trust statement beside the published bundle (agent/trust/statement.ts). */
function statementOf(f: Fixture): Record<string, string> {
  const signer = f.published.signer === undefined ? ca1 : f.published.signer;
  if (signer === null) return {};
  let bundle: ReturnType<typeof trustedBundle>;
  try {
    bundle = trustedBundle(f.published.caPem);
  } catch {
    return {};
  }
  const key = `${bundle.hash}|${f.published.signerPin ?? ''}|${signer.certPem}`;
  if (!versions.has(key)) versions.set(key, versions.size + 1);
  const statement = {
    ...nextStatement(bundle, f.published.signerPin ?? null, 0, f.clock.now(), 365 * 86400_000),
    version: versions.get(key)!,
  };
  const signed = signStatement(statement, createPrivateKey(signer.keyPem), trustedBundle(signer.certPem).pins[0]!);
  return { 'kubeboot-trust': signed.payload, 'kubeboot-trust.jws': signed.jws };
}

const signedOf = (data: Record<string, string>) => ({ payload: data['kubeboot-trust'] ?? null, jws: data['kubeboot-trust.jws'] ?? null });

async function kubeconfigCa(f: Fixture): Promise<string> {
  const text = (await f.store.read(f.config.kubelet.kubeconfig))!;
  return (await parseClientKubeconfig(f.config.kubelet.kubeconfig, text, f.store.read)).caPem!;
}
/** The kubelet's client-CA file as the keeper left it. */
const clientCa = async (f: Fixture) => (await f.store.read(f.config.caRotation.clientCaFile!))!;
const hashOf = (pem: string) => trustedBundle(pem).hash;
/** The samples of one metric family, as /metrics serves them. */
const samples = (f: Fixture, name: string) =>
  f.metrics
    .render()
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `))
    .join('\n');

t.test('old + new CA published: every file holds both, the kubelet restarts once at its slot', async (t) => {
  const f = await fixture(t);
  t.equal(await f.keeper.check(), null, 'nothing published beyond what is trusted: nothing due');
  t.equal(await clientCa(f), trustedBundle(ca1.certPem).pem, 'the client-CA file is kept equal');
  t.same(f.restarts, [], 'the client-CA file alone restarts nothing: the kubelet reloads it by itself');

  f.published.caPem = ca1.certPem + ca2.certPem;
  const due = await f.keeper.check();
  const both = hashOf(ca1.certPem + ca2.certPem);
  t.equal(hashOf(await kubeconfigCa(f)), both, "the kubelet's kubeconfig holds old + new");
  t.equal(hashOf(await clientCa(f)), both, 'and so does the client-CA file');
  t.same(f.restarts, [], 'no restart before its slot');
  const slot = spreadOffset('n1', `${both}|kubelet`, f.config.caRotation.restartWindow * 1000);
  t.equal(due?.getTime(), f.clock.now().getTime() + slot, "due at this node's slot in the restart window");
  t.equal(f.annotations.at(-1)?.active, false, 'the Node says: written, not yet in use');

  await f.clock.tick(slot);
  await f.keeper.check();
  t.same(f.restarts, ['restart kubelet'], 'restarted at its slot');
  t.equal(
    samples(f, 'kubeboot_ca_restarts_total'),
    'kubeboot_ca_restarts_total{consumer="kubelet",result="ok"} 1',
    'the restart is counted',
  );
  t.equal(samples(f, 'kubeboot_ca_bundle_changes_total'), 'kubeboot_ca_bundle_changes_total 1', 'and the adoption');
  t.equal(f.annotations.at(-1)?.active, true, 'the Node says: in use');
  t.equal(f.annotations.at(-1)?.bundle, both);
  await f.keeper.check();
  await f.keeper.check();
  t.same(f.restarts, ['restart kubelet'], 'once per change');
  const annotations = f.annotations.length;
  await f.keeper.check();
  t.equal(f.annotations.length, annotations, 'the annotation is written only when it changes');
});

t.test('a restart owed survives a restart of kubeboot, and is not repeated', async (t) => {
  const f = await fixture(t);
  f.published.caPem = ca1.certPem + ca2.certPem;
  const due = await f.keeper.check();
  const state = JSON.parse((await f.store.read(join(f.config.stateDir, 'ca-rotation.json')))!) as {
    pending: Record<string, { at: string }>;
  };
  t.equal(state.pending.kubelet?.at, due?.toISOString(), 'the owed restart is on disk');
  const again = await fixture(t, { reuse: f });
  again.published.caPem = ca1.certPem + ca2.certPem;
  t.equal((await again.keeper.check())?.toISOString(), due?.toISOString(), 'a new kubeboot keeps the same slot');
  await again.clock.tick(due!.getTime() - again.clock.now().getTime());
  await again.keeper.check();
  await again.keeper.check();
  t.same(again.restarts, ['restart kubelet'], 'and restarts once');
});

t.test('hostile bundles are refused, each with its reason, and nothing is written', async (t) => {
  const cases: { name: string; set: (f: Fixture) => void; reason: string }[] = [
    { name: 'nodes may write cluster-info', set: (f) => (f.server.nodeCanWrite = true), reason: 'node-writable-source' },
    {
      name: 'the API server sees another user',
      set: (f) => (f.server.user = 'system:anonymous'),
      reason: 'unauthenticated-source',
    },
    { name: 'drops the CA the API server presents', set: (f) => (f.published.caPem = ca2.certPem), reason: 'drops-presented-ca' },
    { name: 'a key in the bundle', set: (f) => (f.published.caPem = ca1.certPem + ca1.keyPem), reason: 'unparseable' },
    { name: 'a huge bundle', set: (f) => (f.published.caPem = ca1.certPem.repeat(40)), reason: 'too-big' },
  ];
  for (const c of cases) {
    const f = await fixture(t);
    f.published.caPem = ca1.certPem + ca2.certPem;
    c.set(f);
    await f.keeper.check();
    t.equal(hashOf(await kubeconfigCa(f)), hashOf(ca1.certPem), `${c.name}: the kubeconfig keeps its CA`);
    t.same(f.restarts, [], `${c.name}: nothing restarted`);
    const metric = samples(f, 'kubeboot_ca_bundle_refusals_total');
    t.match(metric, `kubeboot_ca_bundle_refusals_total{reason="${c.reason}"} 1`, `${c.name}: counted as ${c.reason}`);
    t.equal(f.annotations.at(-1)?.refused, c.reason, `${c.name}: the Node tells the admin why`);
    t.equal(f.events.length, 1, `${c.name}: one Warning Event`);
    t.match(f.events[0], { reason: 'CABundleRefused', type: 'Warning', involvedObject: { kind: 'Node', name: 'n1' } });
    t.match(String(f.events[0]?.message), new RegExp(`^${c.reason}: kube-public/cluster-info: `), `${c.name}: the Event says why`);
    await f.keeper.check();
    t.equal(f.events.length, 1, `${c.name}: not repeated while the same bundle is refused`);
    const gauge = samples(f, 'kubeboot_ca_bundle_refused');
    t.match(gauge, `kubeboot_ca_bundle_refused{reason="${c.reason}"} 1`, `${c.name}: the alert's gauge is set`);
    f.published.caPem = ca1.certPem;
    f.server = { ...f.server, nodeCanWrite: false, user: 'system:node:n1' };
    await f.keeper.check();
    t.notMatch(samples(f, 'kubeboot_ca_bundle_refused'), /\} 1/, `${c.name}: and cleared once the cluster publishes an acceptable bundle`);
  }
});

t.test('a CA added by whoever may write cluster-info, without a trusted signature, is refused and nothing is written', async (t) => {
  const rogue = await createCa('rogue');
  const cases: { name: string; signer: CertAndKey | null; reason: string }[] = [
    { name: 'unsigned', signer: null, reason: 'unsigned' },
    { name: 'signed by the rogue CA itself', signer: rogue, reason: 'untrusted-signer' },
  ];
  for (const c of cases) {
    const f = await fixture(t);
    await f.keeper.check();
    const before = await clientCa(f);
    f.published = { caPem: ca1.certPem + rogue.certPem, signer: c.signer };
    await f.keeper.check();
    t.equal(hashOf(await kubeconfigCa(f)), hashOf(ca1.certPem), `${c.name}: the kubeconfig keeps CA 1 alone`);
    t.equal(await clientCa(f), before, `${c.name}: the client-CA file is untouched`);
    t.same(f.restarts, [], `${c.name}: nothing restarted`);
    t.equal(f.annotations.at(-1)?.refused, c.reason, `${c.name}: the Node says ${c.reason}`);
    t.match(String(f.events[0]?.message), new RegExp(`^${c.reason}: .*adds sha256:`), `${c.name}: the Event names the CA it would add`);
    t.match(samples(f, 'kubeboot_ca_bundle_refused'), `{reason="${c.reason}"} 1`, `${c.name}: the alert's gauge is set`);
  }
});

t.test('an older signed statement, or a retired CA, cannot be replayed', async (t) => {
  const f = await fixture(t, { kubeletCa: ca2, trusted: ca1.certPem + ca2.certPem });
  f.server.presented = serving2;
  // The admin retires CA 1 with a statement signed by CA 2 (version n); the node follows.
  f.published = { caPem: ca2.certPem, signer: ca2 };
  await f.keeper.check();
  t.equal(hashOf(await kubeconfigCa(f)), hashOf(ca2.certPem), 'retired: CA 2 alone');
  const version = f.annotations.at(-1)?.version as number;
  t.ok(version > 0, 'the node reports the statement version it accepted');
  // Someone puts back the older statement for CA 1 + CA 2 (signed by CA 2, an older version), after the window.
  await f.clock.tick(f.config.caRotation.restartWindow * 1000 + 1);
  versions.set(`${hashOf(ca1.certPem + ca2.certPem)}||${ca2.certPem}`, version - 1);
  f.published = { caPem: ca1.certPem + ca2.certPem, signer: ca2 };
  await f.keeper.check();
  t.equal(f.annotations.at(-1)?.refused, 'replayed', 'an older version: replayed');
  // ... or signs CA 1 back in with CA 1's own key, as new as she likes.
  f.published = { caPem: ca1.certPem + ca2.certPem, signer: ca1 };
  await f.keeper.check();
  t.equal(f.annotations.at(-1)?.refused, 'untrusted-signer', 'the retired CA signing for itself: untrusted');
  t.equal(hashOf(await kubeconfigCa(f)), hashOf(ca2.certPem), 'and the node still trusts CA 2 alone');
  // The admin re-adds CA 1 on purpose, with a newer statement signed by CA 2: followed.
  versions.set(`${hashOf(ca1.certPem + ca2.certPem)}||${ca2.certPem}`, version + 1);
  f.published = { caPem: ca1.certPem + ca2.certPem, signer: ca2 };
  await f.keeper.check();
  t.equal(hashOf(await kubeconfigCa(f)), hashOf(ca1.certPem + ca2.certPem), 're-added with a newer signed version');
});

t.test('a statement at version 2^53-1, signed by a leaked key of a CA still trusted, freezes no later CA addition', async (t) => {
  const f = await fixture(t);
  const second = () => Math.floor(f.clock.now().getTime() / 1000);
  // She signs the bundle the node holds at 2^53-1: nothing to adopt, and the version is not recorded.
  versions.set(`${hashOf(ca1.certPem)}||${ca1.certPem}`, Number.MAX_SAFE_INTEGER);
  await f.keeper.check();
  t.equal(f.annotations.at(-1)?.version, null, 'not recorded as the floor');
  t.match(samples(f, 'kubeboot_ca_bundle_refusals_total'), '{reason="future-version"} 1', 'counted once');
  await f.keeper.check();
  t.match(samples(f, 'kubeboot_ca_bundle_refusals_total'), '{reason="future-version"} 1', 'the same statement: not counted again');
  // ... or one adding a CA: refused with its reason, nothing written.
  versions.set(`${hashOf(ca1.certPem + ca2.certPem)}||${ca1.certPem}`, Number.MAX_SAFE_INTEGER);
  f.published.caPem = ca1.certPem + ca2.certPem;
  await f.keeper.check();
  t.equal(f.annotations.at(-1)?.refused, 'future-version', 'an addition at 2^53-1: refused');
  t.equal(hashOf(await kubeconfigCa(f)), hashOf(ca1.certPem), 'nothing adopted');
  // The admin's next publish (the current second) is followed.
  versions.set(`${hashOf(ca1.certPem + ca2.certPem)}||${ca1.certPem}`, second());
  await f.keeper.check();
  t.equal(hashOf(await kubeconfigCa(f)), hashOf(ca1.certPem + ca2.certPem), "the admin's addition is adopted");
  t.equal(f.annotations.at(-1)?.version, second(), 'and its version is the floor');
  versions.delete(`${hashOf(ca1.certPem)}||${ca1.certPem}`);
});

t.test('a floor from the future on disk (recorded by an earlier release) is brought back to the clock', async (t) => {
  const f = await fixture(t);
  const stateFile = join(f.config.stateDir, 'ca-rotation.json');
  await f.store.write(
    stateFile,
    JSON.stringify({
      restarted: {},
      pending: {},
      signer: null,
      accepted: { version: Number.MAX_SAFE_INTEGER, bundle: hashOf(ca1.certPem), signerPin: null },
    }),
  );
  const clampedAt = Math.floor(f.clock.now().getTime() / 1000);
  await f.keeper.check();
  t.equal(f.annotations.at(-1)?.version, clampedAt, "the floor is this second, in the Node's annotation");
  t.match(JSON.parse((await f.store.read(stateFile))!), { accepted: { version: clampedAt } }, 'and on disk');
  // A statement published before the clamp stays refused; the admin's next publish is followed.
  await f.clock.tick(f.config.caRotation.restartWindow * 1000 + 1);
  versions.set(`${hashOf(ca1.certPem + ca2.certPem)}||${ca1.certPem}`, clampedAt - 60);
  f.published.caPem = ca1.certPem + ca2.certPem;
  await f.keeper.check();
  t.equal(f.annotations.at(-1)?.refused, 'replayed', 'older than the clamp: replayed');
  versions.set(`${hashOf(ca1.certPem + ca2.certPem)}||${ca1.certPem}`, clampedAt + 60);
  await f.keeper.check();
  t.equal(hashOf(await kubeconfigCa(f)), hashOf(ca1.certPem + ca2.certPem), 'newer: adopted');
});

t.test('a node that joins after a retire starts its floor from the statement it joined with: the old one cannot be replayed', async (t) => {
  const f = await fixture(t, { kubeletCa: ca2, trusted: ca2.certPem });
  f.server.presented = serving2;
  const second = Math.floor(f.clock.now().getTime() / 1000);
  // What the admin published: old + new (signed by CA 2, an hour ago), then CA 2 alone (retire, now).
  const retiredBundle = ca1.certPem + ca2.certPem;
  versions.set(`${hashOf(retiredBundle)}||${ca2.certPem}`, second - 3600);
  versions.set(`${hashOf(ca2.certPem)}||${ca2.certPem}`, second);
  // At its join, discovery read cluster-info (CA 2, the retire's statement) over TLS verified against CA 2.
  f.published = { caPem: ca2.certPem, signer: ca2 };
  const logs = new PassThrough();
  const seeded = await seedFloor({
    store: f.store,
    stateDir: f.config.stateDir,
    logger: createLogger({ level: 'info', format: 'json', stream: logs }),
    caPem: ca2.certPem,
    signed: signedOf(statementOf(f)),
    now: f.clock.now(),
  });
  t.equal(seeded, second, "the retire's version is the new node's floor");
  t.match(String(logs.read()), /trust statement version \d+ .*published with the CA joined with/);
  // Then someone puts back the statement from before the retire.
  f.published = { caPem: retiredBundle, signer: ca2 };
  await f.keeper.check();
  t.equal(f.annotations.at(-1)?.refused, 'replayed', 'the pre-retire statement: replayed');
  t.equal(hashOf(await kubeconfigCa(f)), hashOf(ca2.certPem), 'the retired CA is not adopted');
});

t.test('only a valid statement for exactly the bundle joined with seeds the floor', async (t) => {
  const f = await fixture(t);
  const seed = (caPem: string, signed: { payload: string | null; jws: string | null }) =>
    seedFloor({ store: f.store, stateDir: f.config.stateDir, logger, caPem, signed, now: f.clock.now() });
  f.published = { caPem: ca1.certPem + ca2.certPem };
  t.equal(
    await seed(ca1.certPem, signedOf(statementOf(f))),
    null,
    'for another bundle (a rotation the node still has to follow): no floor',
  );
  t.equal(await seed(ca1.certPem, { payload: null, jws: null }), null, 'unsigned: no floor');
  f.published = { caPem: ca1.certPem, signer: ca2 };
  t.equal(await seed(ca1.certPem, signedOf(statementOf(f))), null, 'signed by a CA it does not trust: no floor');
  t.equal(await f.store.read(join(f.config.stateDir, 'ca-rotation.json')), null, 'nothing written');
});

t.test('bundle changes are followed at most once per restart window; going back and forth is reported', async (t) => {
  const f = await fixture(t);
  f.published.caPem = ca1.certPem + ca2.certPem;
  await f.keeper.check();
  t.equal(hashOf(await kubeconfigCa(f)), hashOf(ca1.certPem + ca2.certPem), 'the first change is followed');
  f.published.caPem = ca1.certPem;
  const due = await f.keeper.check();
  t.equal(hashOf(await kubeconfigCa(f)), hashOf(ca1.certPem + ca2.certPem), 'a second one within the window waits');
  t.equal(f.annotations.at(-1)?.refused, 'churn', 'and the Node says so');
  t.ok(due && due.getTime() <= f.clock.now().getTime() + f.config.caRotation.restartWindow * 1000, 'looked at again when the window ends');
  await f.clock.tick(f.config.caRotation.restartWindow * 1000);
  await f.keeper.check();
  t.equal(hashOf(await kubeconfigCa(f)), hashOf(ca1.certPem), 'then followed');
  t.match(samples(f, 'kubeboot_ca_bundle_refusals_total'), '{reason="alternating"} 1', 'going back to a bundle of the last day is counted');
  t.ok(
    f.events.some((e) => e.reason === 'CABundleAlternating'),
    'and a Warning Event says so',
  );
});

t.test('the signer annotation alone moves nothing: only a signed statement names the signer', async (t) => {
  const f = await fixture(t, { trusted: ca1.certPem + ca2.certPem });
  f.published = { caPem: ca1.certPem + ca2.certPem, signerPin: trustedBundle(ca2.certPem).pins[0]!, signer: null };
  t.equal(await f.keeper.check(), null, 'no re-issue slot from an unsigned annotation');
  await f.clock.tick(f.config.caRotation.reissueWindow * 1000);
  await f.keeper.check();
  t.same(f.reissued, [], 'nothing re-issued');
});

t.test('the signer moved to the new CA: each certificate is re-issued at its slot, once', async (t) => {
  const f = await fixture(t, { trusted: ca1.certPem + ca2.certPem });
  f.published = { caPem: ca1.certPem + ca2.certPem, signerPin: trustedBundle(ca2.certPem).pins[0]! };
  const due = await f.keeper.check();
  t.same(f.reissued, [], 'not before its slot');
  t.ok(due, 'a slot is due');
  await f.clock.tick(due!.getTime() - f.clock.now().getTime());
  await f.keeper.check();
  t.same(f.reissued, ['kubelet'], 'the kubelet certificate, under the old CA, is re-issued');
  await f.keeper.check();
  t.same(f.reissued, ['kubelet'], 'and not again while the renewal runs or if the signer did not really move');
  t.equal(((f.annotations.at(-1)?.issuers ?? {}) as Record<string, string>).kubelet, trustedBundle(ca1.certPem).pins[0]);
});

t.test('retiring the old CA waits until no certificate hangs from it', async (t) => {
  const f = await fixture(t, { trusted: ca1.certPem + ca2.certPem });
  f.server.presented = serving2;
  f.published.caPem = ca2.certPem;
  await f.keeper.check();
  t.equal(hashOf(await kubeconfigCa(f)), hashOf(ca1.certPem + ca2.certPem), 'refused: the kubelet certificate is still under CA 1');
  t.equal(f.annotations.at(-1)?.refused, 'strands-credential');

  const g = await fixture(t, { kubeletCa: ca2, trusted: ca1.certPem + ca2.certPem });
  g.server.presented = serving2;
  g.published.caPem = ca2.certPem;
  await g.keeper.check();
  t.equal(hashOf(await kubeconfigCa(g)), hashOf(ca2.certPem), 'adopted once every certificate is under CA 2');
  t.notMatch(await clientCa(g), ca1.certPem.split('\n')[1]!, 'CA 1 is in no file');
});

t.test('a bundle served over a connection the trusted CA does not verify is never read', async (t) => {
  // Someone in the path answers for the API server with a certificate of their own CA and a bundle of their choosing.
  const rogue = await createCa('rogue');
  const cert = await issueLeaf(rogue, { commonName: 'kube-apiserver', usage: 'server', ipAddresses: ['127.0.0.1'] });
  let served = 0;
  const server = createServer({ cert: cert.certPem, key: cert.keyPem }, (_req, res) => {
    served++;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        kind: 'ConfigMap',
        metadata: { name: 'cluster-info' },
        data: { kubeconfig: clusterInfoKubeconfig('https://127.0.0.1', rogue.certPem) },
      }),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const { port } = server.address() as AddressInfo;
  const f = await fixture(t, { server: `https://127.0.0.1:${port}` });
  await t.rejects(f.keeper.check(), /certificate|self.signed|verify/i, 'the TLS handshake fails against the trusted CA');
  t.equal(served, 0, 'no request reached the impostor');
  t.equal(hashOf(await kubeconfigCa(f)), hashOf(ca1.certPem), 'the kubeconfig keeps its CA');
  t.equal(await f.store.read(f.config.caRotation.clientCaFile!), null, 'nothing was written');
});

t.test('issuance and a CA rewrite never interleave: one writer at a time, in order, a failure does not block the next', async (t) => {
  const serialize = serializer();
  const steps: string[] = [];
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const issuing = serialize(async () => {
    steps.push('issue: store certificate');
    await held;
    steps.push('issue: write kubeconfig');
  });
  const rewriting = serialize(async () => {
    steps.push('rotation: rewrite kubeconfig');
  });
  const failing = serialize(async () => {
    throw new Error('disk full');
  });
  const after = serialize(async () => {
    steps.push('after a failure');
  });
  await new Promise((resolve) => setImmediate(resolve));
  t.same(steps, ['issue: store certificate'], 'the rewrite waits while issuance is between its two writes');
  release();
  await issuing;
  await rewriting;
  await t.rejects(failing, /disk full/);
  await after;
  t.same(steps, ['issue: store certificate', 'issue: write kubeconfig', 'rotation: rewrite kubeconfig', 'after a failure']);
});

t.test('a restart owed is still carried out while a later bundle is refused', async (t) => {
  const f = await fixture(t);
  f.published.caPem = ca1.certPem + ca2.certPem;
  const due = await f.keeper.check();
  f.server.nodeCanWrite = true;
  f.published.caPem = ca2.certPem + ca1.certPem + (await createCa('ca-3')).certPem;
  await f.clock.tick(due!.getTime() - f.clock.now().getTime());
  const next = await f.keeper.check();
  t.same(f.restarts, ['restart kubelet'], 'the kubelet restarts onto the bundle it was owed');
  t.equal(next, null, 'and nothing is left due: no busy loop on a past slot');
  t.equal(f.annotations.at(-1)?.refused, 'node-writable-source');
});

t.test("the daemon's /metrics carries the CA rotation's series (what the alert reads), as a worker forwards them", async (t) => {
  const metrics = createMetrics({ certificates: () => [], processMetrics: false });
  // The keeper runs in a worker; its events reach the daemon's metrics over the IPC channel.
  const forwarded = forwardingMetrics((message) => {
    if (message.kind === 'metric') applyMetric(metrics, message);
  });
  forwarded.caBundleRefused('unsigned');
  forwarded.caBundleAdopted();
  forwarded.caRestart('kubelet', true);
  const text = metrics.render();
  for (const name of [
    'kubeboot_ca_bundle_refused',
    'kubeboot_ca_bundle_refusals_total',
    'kubeboot_ca_bundle_changes_total',
    'kubeboot_ca_restarts_total',
  ])
    t.match(text, new RegExp(`^# TYPE ${name} `, 'm'), `${name} is served`);
  t.match(text, /^kubeboot_ca_bundle_refused\{reason="unsigned"\} 1$/m, 'with what the worker counted');
  t.match(text, /^kubeboot_ca_restarts_total\{consumer="kubelet",result="ok"\} 1$/m);
});

t.test(
  "the kubelet's client-CA file is seeded from the kubeconfig's CA when missing, never overwritten, only with rotation on",
  async (t) => {
    const f = await fixture(t);
    const file = f.config.caRotation.clientCaFile!;
    await f.keeper.seedClientCa(ca1.certPem);
    t.equal(hashOf(await clientCa(f)), hashOf(ca1.certPem), 'a missing file is written from the CA given');

    await f.keeper.seedClientCa(ca2.certPem);
    t.equal(hashOf(await clientCa(f)), hashOf(ca1.certPem), 'an existing file is left to the looks');

    const g = await fixture(t);
    g.config.caRotation = { ...g.config.caRotation, enabled: false };
    await g.keeper.seedClientCa(ca1.certPem);
    t.equal(await g.store.read(file), null, 'nothing is written with CA rotation off');
  },
);

t.test(
  'on disk: the client-CA file is 0644, the kubeconfig and the bookkeeping 0600 whatever the umask, each replaced whole and told to the watcher',
  async (t) => {
    const umask = process.umask(0o077);
    t.teardown(() => process.umask(umask));
    const told: string[] = [];
    const f = await fixture(t, {
      onDisk: fileStore({ observer: { willWrite: (p) => void told.push(`will ${p}`), didWrite: (p) => void told.push(`did ${p}`) } }),
    });
    const { kubeconfig } = f.config.kubelet;
    const clientCaFile = f.config.caRotation.clientCaFile!;
    const stateFile = join(f.config.stateDir, 'ca-rotation.json');
    await f.keeper.seedClientCa(ca1.certPem);
    const seeded = await stat(clientCaFile);
    t.equal(seeded.mode & 0o777, 0o644, 'a seeded client-CA file is readable by the kubelet, as a CA certificate is public');
    const written = await stat(kubeconfig);
    told.length = 0;

    f.published.caPem = ca1.certPem + ca2.certPem;
    await f.keeper.check();
    t.equal(hashOf(await kubeconfigCa(f)), hashOf(ca1.certPem + ca2.certPem), 'the kubeconfig holds old + new');
    const rewritten = { clientCa: await stat(clientCaFile), kubeconfig: await stat(kubeconfig), state: await stat(stateFile) };
    t.equal(rewritten.clientCa.mode & 0o777, 0o644, 'the rewritten client-CA file stays 0644');
    t.equal(rewritten.kubeconfig.mode & 0o777, 0o600, 'the kubeconfig 0600');
    t.equal(rewritten.state.mode & 0o777, 0o600, 'the bookkeeping 0600');
    t.not(rewritten.clientCa.ino, seeded.ino, 'the client-CA file is a new file renamed over the old, not rewritten in place');
    t.not(rewritten.kubeconfig.ino, written.ino, 'so is the kubeconfig');
    t.same(
      [...(await readdir(join(clientCaFile, '..'))), ...(await readdir(f.config.stateDir))].filter((n) => n.includes('.tmp-')),
      [],
      'no temp file is left',
    );
    for (const file of [kubeconfig, clientCaFile, stateFile])
      t.ok(
        told.indexOf(`will ${file}`) >= 0 && told.indexOf(`will ${file}`) < told.indexOf(`did ${file}`),
        `${file}: told before and after`,
      );
  },
);

/** A keeper whose look is `check` (a stub), on its own clock; `said` collects its warnings. */
function stubbedKeeper(t: Test, check: () => Promise<Date | null>, random: () => number) {
  const clock = new FakeClock(new Date('2025-06-01T00:00:00Z'));
  const config = defaultConfig('n1');
  const stop = new AbortController();
  t.teardown(() => stop.abort());
  const stream = new PassThrough();
  let said = '';
  stream.on('data', (d: Buffer) => (said += d.toString()));
  const keeper = new TrustKeeper({
    config: () => config,
    logger: createLogger({ level: 'warn', format: 'text', stream }),
    clock,
    random,
    signal: stop.signal,
    nodeCredential: () => null,
    serialize: serializer(),
    reissue: () => undefined,
    runCommands: async () => true,
    metrics: createMetrics({ certificates: () => [], processMetrics: false }),
  });
  let looks = 0;
  keeper.check = async () => {
    looks++;
    return check();
  };
  return { keeper, clock, config, stop, looks: () => looks, said: () => said };
}

t.test('a CA step looks once and says when to look again: every interval, jittered 0.8–1.2 to spread a fleet', async (t) => {
  const draws = [0, 0.5, 1];
  const k = stubbedKeeper(
    t,
    async () => null,
    () => draws.shift()!,
  );
  const interval = k.config.caRotation.interval * 1000;
  for (const factor of [0.8, 1, 1.2]) {
    const before = k.looks();
    const { next, look } = await k.keeper.step();
    t.equal(k.looks(), before + 1, 'one look per step');
    t.equal(next.getTime(), k.clock.now().getTime() + interval * factor, `next at ${factor} × the interval`);
    t.equal(look, null, 'no look for the daemon without a check that read cluster-info');
  }
  t.equal(k.clock.pending, 0, 'and nothing sleeps: no timer is left armed');
});

t.test('a restart or re-issue slot before the interval brings the next step forward, never to less than a second from now', async (t) => {
  let due: Date | null = null;
  const k = stubbedKeeper(
    t,
    async () => due,
    () => 0.5,
  );
  const now = k.clock.now().getTime();
  const interval = k.config.caRotation.interval * 1000;
  due = new Date(now + 5 * 60_000);
  t.equal((await k.keeper.step()).next.getTime(), now + 5 * 60_000, 'a slot in five minutes: looked at then');
  due = new Date(now - 60_000);
  t.equal((await k.keeper.step()).next.getTime(), now + 1000, 'a slot already past: a second from now, not a busy loop');
  due = new Date(now + 2 * interval);
  t.equal((await k.keeper.step()).next.getTime(), now + interval, 'a slot after the interval: the interval first');
});

t.test('a failed check is logged and the step still says when to look again; a stopped one rejects', async (t) => {
  const k = stubbedKeeper(
    t,
    async () => {
      throw new Error('connection reset');
    },
    () => 0.5,
  );
  const { next, look } = await k.keeper.step();
  t.equal(next.getTime(), k.clock.now().getTime() + k.config.caRotation.interval * 1000, 'looked at again after the interval');
  t.equal(look, null);
  t.match(
    k.said(),
    `CA rotation: could not check kube-public/cluster-info: connection reset; trying again at ${next.toISOString()}`,
    'the failure is logged with the next try',
  );
  k.stop.abort();
  await t.rejects(k.keeper.step(), /connection reset/, 'a step stopped with the worker is not answered');
});

t.test('with nothing pending, a CA step hands the daemon its next look: where, as whom, what it acted on, when, until when', async (t) => {
  const f = await fixture(t);
  // Unsigned: the fixture signs the statement afresh on each GET (ECDSA), which a real cluster-info does not.
  f.published.signer = null;
  const { next, look } = await f.keeper.step();
  const current = join(identitiesFor(f.config)[0]!.certDir, 'kubelet-client-current.pem');
  t.equal(next.getTime(), f.clock.now().getTime() + f.config.caRotation.interval * 1000, 'next after the interval');
  t.match(look, {
    url: `${SERVER}/api/v1/namespaces/kube-public/configmaps/cluster-info?resourceVersion=0`,
    caPem: ca1.certPem,
    tlsServerName: null,
    certFile: current,
    keyFile: current,
    at: next.toISOString(),
  });
  t.match(look?.digest, /^[0-9a-f]{64}$/, 'a digest of what it read');
  t.equal(look?.until, ca1.cert.notAfter.toISOString(), 'good until the trusted CA expires');
  t.notOk(JSON.stringify(look).includes('PRIVATE KEY'), 'no key bytes in it');
  t.equal((await f.keeper.step()).look?.digest, look?.digest, 'the same cluster-info, the same digest');

  f.published = { caPem: ca1.certPem + ca2.certPem };
  const owed = await f.keeper.step();
  t.equal(owed.look, null, "a restart owed: the next look is a worker's");
  const slot = spreadOffset('n1', `${hashOf(ca1.certPem + ca2.certPem)}|kubelet`, f.config.caRotation.restartWindow * 1000);
  const first = Math.max(1000, Math.min(slot, f.config.caRotation.interval * 1000));
  t.equal(owed.next.getTime(), f.clock.now().getTime() + first, 'at the restart slot or the interval, whichever comes first');

  const g = await fixture(t);
  g.published.caPem = 'not a bundle';
  t.equal((await g.keeper.step()).look, null, 'a refused bundle: a worker looks again (its reason may pass with time)');

  const h = await fixture(t);
  h.published.signer = null;
  h.config.caRotation = { ...h.config.caRotation, interval: 30 * 86400 };
  const late = await h.keeper.step();
  t.ok(late.next > ca1.cert.notAfter, 'the next look falls after the trusted CA expires');
  t.equal(late.look, null, "so it is a worker's: the daemon's look is good only until then");
});

t.test('a Node that does not exist yet: the daemon still makes the next look itself, and asks for the Node in it', async (t) => {
  const f = await fixture(t);
  f.published.signer = null;
  f.server.nodeExists = false;
  const { look } = await f.keeper.step();
  t.same(f.annotations, [], 'no annotation could be written');
  t.ok(look, "the next look is the daemon's, not a worker's every interval");
  t.equal(look?.node, `${SERVER}/api/v1/nodes/n1`, 'the look asks whether the Node appeared (the annotation is owed)');
  f.server.nodeExists = true;
  const annotated = await f.keeper.step();
  t.equal(f.annotations.length, 1, 'a worker after the Node appeared writes it');
  t.equal(annotated.look?.node, undefined, 'then the look is of cluster-info alone');
});
