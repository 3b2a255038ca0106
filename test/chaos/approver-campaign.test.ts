// The approver under attack, as a property: hundreds of generated CSRs (seeded
// PRNG, seed printed) from nodes' credentials (names valid and hostile, with
// and without a Node object), bootstrap tokens and ordinary users, with
// random subjects (string types, extra attributes, multi-valued RDNs, several
// CNs), SAN kinds, extensions, key types, usages, signers, expirations and
// CSR names (thousands of characters, newlines, NUL, ESC, unicode), against
// the real control plane with the shipped RBAC and `kubeboot approver`
// running. One invariant: every CSR the approver approved is one the policy
// table (README, "Cluster side") allows, judged independently of the
// approver's code on Go's reading of the request and of the certificate the
// signer issued (test/support/policy-model.ts); and at no moment does one
// node hold two approved, unissued kube-proxy CSRs (a burst with the signer
// paused). And the approver stays live: /healthz answers
// within HEALTH_BOUND_MS on every probe throughout.
// KUBEBOOT_CHAOS=1 (npm run test:chaos) runs a longer campaign.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import t from 'tap';
import { Agent, request } from 'undici';
import type { KubeObject } from '../support/admin.js';
import { CSRS, installApprover, startApprover } from '../support/approver.js';
import { controlPlaneOrSkip, type ControlPlane } from '../support/controlplane.js';
import { expectStatus, kubeClient, type KubeClient } from '../support/http.js';
import { assertNoSecrets, forbid } from '../support/kubeboot.js';
import {
  buildRequestPem,
  generateKey,
  OIDS,
  sanExtension,
  tlv,
  oid,
  type Extension,
  type KeyKind,
  type KeyPair,
  type NameValue,
  type San,
  type StringType,
} from '../support/pkcs10.js';
import { freePort } from '../support/processes.js';
import { buildCertview, goViews, isDnsSubdomain, policyProblems, type ModelPolicy, type World } from '../support/policy-model.js';
import { prng } from '../support/prng.js';

const long = process.env.KUBEBOOT_CHAOS === '1';
const COUNT = Number(process.env.KUBEBOOT_CAMPAIGN_CSRS ?? (long ? 3_000 : 400));
const SEED = Number(process.env.KUBEBOOT_CHAOS_SEED ?? Date.now() % 1_000_000);
/** Longest generated CSR name; the API server takes 40,000+. */
const MAX_NAME = long ? 8_192 : 4_096;
/** Every /healthz probe must answer within this; a healthy approver answers in milliseconds. */
const HEALTH_BOUND_MS = 2_000;
/** After the last CSR, how long approvals may still come in before the approver is stopped and the books closed. */
const SETTLE_MS = long ? 180_000 : 60_000;
const BURST_NODES = long ? 8 : 4;
const BURST_SIZE = 4;

// The approver's configuration, as the model below reads the README's table with it.
const DNS_SUFFIX = 'nodes.example';
const IP_CIDR = '10.0.0.0/16';
const MAX_EXPIRATION = 24 * 3600;
// The model judges no kubelet client rule: that approval (on by default) stays off here.
const POLICY_FLAGS = [
  '--no-approve-kubelet-client',
  '--approve-kubelet-serving',
  '--max-expiration',
  '24h',
  '--serving-dns-suffix',
  DNS_SUFFIX,
  '--serving-ip-cidr',
  IP_CIDR,
  '--resync-period',
  '10m',
];
const MODEL: ModelPolicy = {
  kubeProxyCommonName: 'system:kube-proxy',
  dnsSuffix: DNS_SUFFIX,
  ipv4Cidr: IP_CIDR,
  maxExpirationSeconds: MAX_EXPIRATION,
};

const SIGNERS = {
  client: 'kubernetes.io/kube-apiserver-client',
  serving: 'kubernetes.io/kubelet-serving',
  kubelet: 'kubernetes.io/kube-apiserver-client-kubelet',
  custom: 'example.com/custom',
} as const;
const DS = 'digital signature';
const KE = 'key encipherment';
const CA = 'client auth';
const SA = 'server auth';
const KUBE_PROXY_CN = 'system:kube-proxy';

t.comment(`approver campaign seed ${SEED} (replay with KUBEBOOT_CHAOS_SEED=${SEED}), ${COUNT} CSRs`);
const rand = prng(SEED);
const pick = <T>(list: readonly T[]): T => list[Math.floor(rand() * list.length)]!;
const chance = (p: number) => rand() < p;
const weighted = <T>(entries: readonly [T, number][]): T => {
  let r = rand() * entries.reduce((sum, [, w]) => sum + w, 0);
  for (const [value, w] of entries) if ((r -= w) < 0) return value;
  return entries[0]![0];
};

// ---------------------------------------------------------------------------
// Requesters

type RequesterKind = 'node' | 'token' | 'user';

interface Requester {
  kind: RequesterKind;
  /** What the API server will record as spec.username. */
  username: string;
  /** For nodes: the name after system:node:. */
  nodeName?: string;
  client: KubeClient;
  /** Closed once its CSRs are in. */
  transient: boolean;
}

/** Node names an attacker would try (finding 1: `.`, `..`); `{i}` becomes a number. */
const HOSTILE_NODE_NAMES = [
  '.',
  '..',
  '...',
  '-',
  'a..b',
  '.cn-{i}',
  'cn-{i}.',
  'Cn-{i}',
  'cn_{i}',
  'cn-{i}/status',
  'cn-{i}/../regular-0',
  '%2e',
  '%2e%2e',
  'cn-{i} ',
  'cn-{i}\n',
  'ñ-{i}',
  'cn-{i}\u0000',
  '?',
  '#',
  'cn-{i}?watch=1',
  'cn-{i};x',
];

/**
 * CSR names the API server accepts, each on a valid CSR from a valid node, so
 * that the approver logs them: finding 2's shape (x, then "\n " repeated, then
 * x; 7,002 characters froze the approver for 20.7 s), and control characters
 * a journal line must not carry raw (finding 5).
 */
const HOSTILE_CSR_NAMES = [
  `x${'\n '.repeat(2_040)}x`,
  `nul\u0000esc\u001b[31m<3>cr\rlf\n${'\t'.repeat(200)}end`,
  `${' \n'.repeat(1_000)}token: ${'x'.repeat(16)}`,
];

/** Names a kubelet might be given, and the hostile ones. */
function nodeName(i: number): string {
  return weighted<() => string>([
    [() => `cn-${i}`, 80],
    [() => pick(HOSTILE_NODE_NAMES).replace('{i}', String(i)), 15],
    [() => `cn-${i}-${'a'.repeat(250)}`, 2],
    [() => `cn-${i}.${DNS_SUFFIX}`, 3],
  ])();
}

// ---------------------------------------------------------------------------
// Generated CSRs

type Target = 'client' | 'serving' | 'kubelet' | 'custom';

interface Generated {
  id: number;
  name: string;
  requester: Requester;
  target: Target;
  signer: string;
  usages: string[];
  expirationSeconds: number | undefined;
  pem: string;
  /** What was done to the valid template, for the report. */
  mutations: string[];
}

/**
 * Two keys of each kind, made before anything is measured: an RSA key is made
 * synchronously and would hold up this process's own /healthz probes.
 */
const KEY_KINDS: KeyKind[] = ['ecdsa-p256', 'ecdsa-p384', 'ecdsa-p224', 'rsa-1024', 'rsa-2048', 'ed25519'];
const KEY_POOL = new Map<KeyKind, KeyPair[]>(KEY_KINDS.map((kind) => [kind, [generateKey(kind), generateKey(kind)]]));
const key = (kind: KeyKind): KeyPair => pick(KEY_POOL.get(kind)!);

const utf8 = (o: string, value: string): NameValue => ({ oid: o, type: 'utf8', value });

/** Names of up to MAX_NAME characters from an alphabet with newlines, NUL, ESC and unicode; the API server refuses `/` and `%`. */
function csrName(i: number): { name: string; weird: boolean } {
  const plain = `campaign-${i}-${Math.floor(rand() * 1e6).toString(36)}`;
  if (!chance(0.12)) return { name: plain, weird: false };
  const length = 1 + Math.floor(rand() * MAX_NAME);
  const body = weighted<() => string>([
    // finding 2's shape: x, then "\n " repeated, then x
    [() => `x${'\n '.repeat(Math.floor(length / 2))}x`, 1],
    [
      () =>
        Array.from({ length }, () =>
          pick(['x', 'x', 'x', '\n', ' ', '\t', '\u0000', '\u001b', 'é', '日', '🙂', '-', '.', ':', '"', '\\', '<3>', 'token: ', '\r']),
        ).join(''),
      3,
    ],
    [() => '\u001b[31m'.repeat(Math.ceil(length / 5)), 1],
  ])();
  return { name: `${plain}-${body}`, weird: true };
}

interface Draft {
  subject: NameValue[][];
  sans: San[];
  extensions: Extension[];
  secondExtensionRequest: Extension[] | null;
  keyKind: KeyKind;
  badSignature: boolean;
  signer: string;
  usages: string[];
  expirationSeconds: number | undefined;
}

function template(target: Target, node: string | undefined, world: World): Draft {
  const keyKind = weighted<KeyKind>([
    ['ecdsa-p256', 45],
    ['ecdsa-p384', 12],
    ['rsa-2048', 15],
    ['rsa-1024', 8],
    ['ecdsa-p224', 10],
    ['ed25519', 10],
  ]);
  const rsa = keyKind.startsWith('rsa-');
  const base = {
    extensions: [],
    secondExtensionRequest: null,
    keyKind,
    badSignature: false,
    expirationSeconds: pick([undefined, undefined, 3600, 86400]),
  };
  const self = `system:node:${node ?? 'cn-x'}`;
  switch (target) {
    case 'client':
      return {
        ...base,
        subject: [[utf8(OIDS.CN, KUBE_PROXY_CN)]],
        sans: [],
        signer: SIGNERS.client,
        usages: rsa && chance(0.5) ? [DS, KE, CA] : [DS, CA],
      };
    case 'serving': {
      const ips = (world.nodes.get(node ?? '') ?? []).filter((a) => a.startsWith('10.0.'));
      const sans: San[] = [
        { kind: 'dns', value: node ?? 'cn-x' },
        ...(chance(0.5) ? [{ kind: 'dns' as const, value: `${node}.${DNS_SUFFIX}` }] : []),
        ...ips.map((value) => ({ kind: 'ip' as const, value })),
      ];
      return {
        ...base,
        subject: [[utf8(OIDS.O, 'system:nodes')], [utf8(OIDS.CN, self)]],
        sans,
        signer: SIGNERS.serving,
        usages: chance(0.3) ? [DS, KE, SA] : [DS, SA],
      };
    }
    case 'kubelet':
      return {
        ...base,
        subject: [[utf8(OIDS.O, 'system:nodes')], [utf8(OIDS.CN, self)]],
        sans: [],
        signer: SIGNERS.kubelet,
        usages: [DS, CA],
      };
    case 'custom':
      return { ...base, subject: [[utf8(OIDS.CN, KUBE_PROXY_CN)]], sans: [], signer: SIGNERS.custom, usages: [DS, CA] };
  }
}

/** One change to a draft; returns its name for the report. */
function mutate(d: Draft, node: string | undefined, otherNode: string): string {
  const cnIndex = () => d.subject.findIndex((rdn) => rdn.some((v) => v.oid === OIDS.CN));
  const setCn = (value: string) => {
    const i = cnIndex();
    if (i >= 0) d.subject[i] = [utf8(OIDS.CN, value)];
    else d.subject.push([utf8(OIDS.CN, value)]);
  };
  const kinds: [string, () => void][] = [
    [
      'cn',
      () =>
        setCn(
          pick([
            KUBE_PROXY_CN,
            `${KUBE_PROXY_CN} `,
            `${KUBE_PROXY_CN}\u0000`,
            'SYSTEM:KUBE-PROXY',
            `${KUBE_PROXY_CN}x`,
            `system:node:${node}`,
            `system:node:${otherNode}`,
            'system:masters',
            'system:admin',
            '',
            `${KUBE_PROXY_CN}\nO=system:masters`,
            'system:kube-controller-manager',
          ]),
        ),
    ],
    [
      'o',
      () => {
        d.subject = d.subject.filter((rdn) => !rdn.some((v) => v.oid === OIDS.O));
        for (const o of pick([
          [],
          ['system:nodes'],
          ['system:masters'],
          ['system:nodes', 'system:nodes'],
          ['system:nodes', 'system:masters'],
          ['system:bootstrappers'],
          [''],
          ['System:Nodes'],
        ]))
          d.subject.unshift([utf8(OIDS.O, o)]);
      },
    ],
    [
      'string-type',
      () => {
        const type = pick<StringType>(['printable', 'ia5', 'teletex', 'bmp', 'universal']);
        d.subject = d.subject.map((rdn) => rdn.map((v) => (chance(0.7) ? { ...v, type } : v)));
      },
    ],
    [
      'extra-attribute',
      () => {
        const [o, value] = pick<[string, string]>([
          [OIDS.OU, 'system:masters'],
          [OIDS.serialNumber, '1'],
          [OIDS.UID, 'system:admin'],
          [OIDS.emailAddress, 'root@example.com'],
          [OIDS.C, 'DE'],
          [OIDS.DC, 'example'],
        ]);
        d.subject.splice(Math.floor(rand() * (d.subject.length + 1)), 0, [utf8(o, value)]);
      },
    ],
    [
      'multi-valued-rdn',
      () => {
        const flat = d.subject.flat();
        d.subject = [chance(0.5) ? flat : [...flat, utf8(OIDS.OU, 'ops')]];
      },
    ],
    [
      'second-cn',
      () => {
        const extra = [utf8(OIDS.CN, pick([KUBE_PROXY_CN, 'system:kube-controller-manager', `system:node:${otherNode}`, 'admin']))];
        if (chance(0.5)) d.subject.unshift(extra);
        else d.subject.push(extra);
      },
    ],
    [
      'san-add',
      () => {
        d.sans.push(
          pick<San>([
            { kind: 'dns', value: node ?? 'x' },
            { kind: 'dns', value: otherNode },
            { kind: 'dns', value: `${node}.${DNS_SUFFIX}` },
            { kind: 'dns', value: `*.${DNS_SUFFIX}` },
            { kind: 'dns', value: (node ?? 'x').toUpperCase() },
            { kind: 'dns', value: 'kubernetes.default.svc' },
            { kind: 'ip', value: '10.0.0.1' },
            { kind: 'ip', value: '10.0.250.250' },
            { kind: 'ip', value: '192.168.1.1' },
            { kind: 'ip', value: '::1' },
            { kind: 'email', value: 'root@example.com' },
            { kind: 'uri', value: 'spiffe://cluster/ns/kube-system/sa/admin' },
            { kind: 'otherName', value: 'admin@example.com' },
            { kind: 'registeredID', value: '1.2.3.4' },
            { kind: 'directoryName', value: [[utf8(OIDS.CN, 'system:kube-controller-manager')]] },
          ]),
        );
      },
    ],
    ['san-none', () => void (d.sans = [])],
    [
      'extension',
      () => {
        d.extensions.push(
          pick<Extension>([
            { oid: OIDS.basicConstraints, critical: true, value: tlv(0x30, tlv(0x01, [0xff])) },
            { oid: '1.2.3.4.5.6.7', critical: true, value: tlv(0x05, []) },
            { oid: OIDS.keyUsage, critical: true, value: tlv(0x03, [0x02, 0x04]) },
            {
              oid: OIDS.extKeyUsage,
              value: tlv(0x30, Buffer.concat([oid('1.3.6.1.5.5.7.3.1'), oid('1.3.6.1.5.5.7.3.2'), oid('2.5.29.37.0')])),
            },
            { oid: OIDS.subjectKeyIdentifier, value: tlv(0x04, [1, 2, 3, 4]) },
            sanExtension([{ kind: 'dns', value: otherNode }]),
          ]),
        );
      },
    ],
    [
      'second-extension-request',
      () =>
        void (d.secondExtensionRequest = [
          sanExtension([
            pick<San>([
              { kind: 'uri', value: 'spiffe://cluster/admin' },
              { kind: 'dns', value: otherNode },
            ]),
          ]),
        ]),
    ],
    [
      'usages',
      () =>
        void (d.usages = pick([
          [DS, CA],
          [DS, KE, CA],
          [CA],
          [DS, CA, SA],
          [DS, SA],
          [DS, KE, SA],
          [DS, CA, CA],
          [DS, CA, 'cert sign'],
          ['any'],
          [DS, CA, 'code signing'],
          [CA, DS],
          [SA, DS],
          [DS, SA, SA],
        ])),
    ],
    ['signer', () => void (d.signer = pick([...Object.values(SIGNERS), 'kubernetes.io/legacy-unknown']))],
    [
      'expiration',
      () => void (d.expirationSeconds = pick([undefined, 600, 3600, MAX_EXPIRATION, MAX_EXPIRATION + 1, 365 * 86400, 599, 2 ** 31 - 1])),
    ],
    ['key', () => void (d.keyKind = pick(KEY_KINDS))],
    ['bad-signature', () => void (d.badSignature = true)],
  ];
  const [name, apply] = pick(kinds);
  apply();
  return name;
}

// ---------------------------------------------------------------------------
// A timeline of every CSR change, in resourceVersion order (one watch)

interface Timeline {
  /** Moments a node held two or more approved, unissued kube-proxy CSRs. */
  overlaps: { requester: string; names: string[] }[];
  events: number;
  stop(): Promise<void>;
}

const isKubebootApproval = (c: KubeObject) => c.type === 'Approved' && c.reason === 'KubebootApprover';
/** The CSR carries kubeboot approver's approval. */
const approvedByUs = (csr: KubeObject | null | undefined) => ((csr?.status?.conditions ?? []) as KubeObject[]).some(isKubebootApproval);

async function startTimeline(plane: ControlPlane, admin: { certPem: string; keyPem: string }): Promise<Timeline> {
  const agent = new Agent({ connect: { ca: plane.caPem, cert: admin.certPem, key: admin.keyPem }, bodyTimeout: 0 });
  const list = expectStatus(await plane.admin.request<{ metadata: { resourceVersion: string } }>('GET', CSRS), 'list CSRs', 200);
  const state = new Map<string, { requester: string; signer: string; open: boolean }>();
  const timeline: Timeline = { overlaps: [], events: 0, stop: async () => {} };
  const abort = new AbortController();
  let rv = list.body.metadata.resourceVersion;
  const apply = (type: string, csr: KubeObject) => {
    timeline.events++;
    const conditions = (csr.status?.conditions ?? []) as KubeObject[];
    const open =
      conditions.some(isKubebootApproval) &&
      !csr.status?.certificate &&
      !conditions.some((c) => c.type === 'Denied' || c.type === 'Failed');
    if (type === 'DELETED') state.delete(csr.metadata.name);
    else state.set(csr.metadata.name, { requester: csr.spec.username, signer: csr.spec.signerName, open });
    if (!open || csr.spec.signerName !== SIGNERS.client) return;
    const names = [...state].filter(([, s]) => s.open && s.requester === csr.spec.username && s.signer === SIGNERS.client).map(([n]) => n);
    if (names.length > 1) timeline.overlaps.push({ requester: csr.spec.username, names });
  };
  const loop = (async () => {
    while (!abort.signal.aborted) {
      try {
        const res = await request(new URL(`${CSRS}?watch=1&allowWatchBookmarks=true&resourceVersion=${rv}`, plane.server), {
          dispatcher: agent,
          signal: abort.signal,
        });
        let buffered = '';
        for await (const chunk of res.body) {
          buffered += (chunk as Buffer).toString();
          let nl: number;
          while ((nl = buffered.indexOf('\n')) >= 0) {
            const line = buffered.slice(0, nl);
            buffered = buffered.slice(nl + 1);
            if (!line.trim()) continue;
            const event = JSON.parse(line) as { type: string; object: KubeObject };
            if (event.type === 'ERROR') throw new Error(`timeline watch: ${JSON.stringify(event.object).slice(0, 200)}`);
            rv = event.object.metadata.resourceVersion as string;
            if (event.type !== 'BOOKMARK') apply(event.type, event.object);
          }
        }
      } catch (err) {
        if (abort.signal.aborted) return;
        throw err;
      }
    }
  })();
  loop.catch(() => {});
  let stopping: Promise<void> | null = null;
  timeline.stop = () =>
    (stopping ??= (async () => {
      abort.abort();
      await loop.catch(() => {});
      await agent.close();
    })());
  return timeline;
}

// ---------------------------------------------------------------------------
// Liveness: /healthz probed throughout, from a worker thread, so that this
// process's own work (parsing the CSR list, minting certificates) is never
// counted against the approver.

const PROBE_WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const http = require('node:http');
const { performance } = require('node:perf_hooks');
const samples = [];
let stopped = false;
parentPort.on('message', () => { stopped = true; });
function probe() {
  if (stopped) return parentPort.postMessage(samples);
  const started = performance.now();
  const done = (failure) => {
    samples.push({ at: performance.timeOrigin + started, ms: performance.now() - started, failure });
    setTimeout(probe, 200); // pacing between probes, not a synchronisation
  };
  const req = http.get({ host: '127.0.0.1', port: workerData.port, path: '/healthz', timeout: workerData.giveUpMs }, (res) => {
    res.resume();
    res.on('end', () => done(res.statusCode === 200 ? undefined : 'HTTP ' + res.statusCode));
  });
  req.on('timeout', () => req.destroy(new Error('no answer within ' + workerData.giveUpMs + ' ms')));
  req.on('error', (err) => done(err.message));
}
probe();
`;

interface Probe {
  /** Wall-clock ms (performance.timeOrigin-based) when the probe started, how long it took, and why it failed if it did. */
  at: number;
  ms: number;
  failure?: string;
}

function probeHealth(port: number): { stop(): Promise<Probe[]> } {
  const worker = new Worker(PROBE_WORKER, { eval: true, workerData: { port, giveUpMs: HEALTH_BOUND_MS * 5 } });
  const results = new Promise<Probe[]>((resolve, reject) => {
    worker.once('message', (samples: Probe[]) => resolve(samples));
    worker.once('error', reject);
  });
  return {
    async stop() {
      worker.postMessage('stop');
      const samples = await results;
      await worker.terminate();
      return samples;
    },
  };
}

// ---------------------------------------------------------------------------

const plane = await controlPlaneOrSkip(t, { name: 'campaign' });
if (plane) {
  const dir = await mkdtemp(join(tmpdir(), 'kubeboot-campaign-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const certview = await buildCertview(dir);
  const config = await installApprover(plane, dir);

  // Ordinary users may create CSRs (group campaign:users); one of them, bob, is also
  // granted the approver's virtual subresources, so that only requester-is-node stops him.
  const rbac = '/apis/rbac.authorization.k8s.io/v1';
  expectStatus(
    await plane.admin.request('POST', `${rbac}/clusterroles`, {
      metadata: { name: 'campaign:csr-requester' },
      rules: [{ apiGroups: ['certificates.k8s.io'], resources: ['certificatesigningrequests'], verbs: ['create', 'get', 'list', 'watch'] }],
    }),
    'create campaign role',
    201,
  );
  expectStatus(
    await plane.admin.request('POST', `${rbac}/clusterrolebindings`, {
      metadata: { name: 'campaign:csr-requester' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'campaign:csr-requester' },
      subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'Group', name: 'campaign:users' }],
    }),
    'bind campaign role',
    201,
  );
  for (const sub of ['kubeproxyclient', 'selfnodeserving']) {
    expectStatus(
      await plane.admin.request('POST', `${rbac}/clusterrolebindings`, {
        metadata: { name: `campaign:bob-${sub}` },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: `kubeboot:certificatesigningrequests:${sub}` },
        subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: 'bob' }],
      }),
      `grant bob ${sub}`,
      201,
    );
  }

  const world: World = { nodes: new Map() };
  const asCert = async (cn: string, organizations: string[]) =>
    kubeClient({ server: plane.server, caPem: plane.caPem, ...(await plane.mintClientCert({ commonName: cn, organizations })) });
  const users: Requester[] = [];
  for (const [cn, o] of [
    ['alice', ['campaign:users']],
    ['bob', ['campaign:users']],
    ['system:node:cn-0', ['campaign:users']],
    [KUBE_PROXY_CN, ['campaign:users']],
  ] as const) {
    users.push({ kind: 'user', username: cn, client: await asCert(cn, [...o]), transient: false });
  }
  const tokens: Requester[] = [];
  for (const extraGroups of [[], ['system:bootstrappers:campaign']]) {
    const token = await plane.admin.createBootstrapToken({ extraGroups });
    forbid(token.secret);
    tokens.push({
      kind: 'token',
      username: `system:bootstrap:${token.id}`,
      client: kubeClient({ server: plane.server, caPem: plane.caPem, token: token.token }),
      transient: false,
    });
  }
  /** Node requesters that file several CSRs, for the one-unissued rule. */
  const regulars: Requester[] = [];

  async function nodeRequester(i: number, name = nodeName(i), withNode = chance(0.85)): Promise<Requester> {
    if (withNode && isDnsSubdomain(name)) {
      const third = 1 + (i % 250);
      const addresses = [
        { type: 'InternalIP', address: `10.0.${Math.floor(i / 250) % 256}.${third}` },
        { type: 'Hostname', address: name },
        ...(chance(0.3) ? [{ type: 'ExternalIP', address: `192.168.1.${third}` }] : []),
      ];
      expectStatus(
        await plane!.admin.request('POST', '/api/v1/nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name } }),
        `create node ${name}`,
        201,
      );
      const created = (await plane!.admin.request<KubeObject>('GET', `/api/v1/nodes/${name}`)).body;
      created.status = { ...(created.status ?? {}), addresses };
      expectStatus(await plane!.admin.request('PUT', `/api/v1/nodes/${name}/status`, created), `node ${name} addresses`, 200);
      world.nodes.set(
        name,
        addresses.filter((a) => a.type !== 'Hostname').map((a) => a.address),
      );
    }
    return {
      kind: 'node',
      username: `system:node:${name}`,
      nodeName: name,
      client: await asCert(`system:node:${name}`, ['system:nodes']),
      transient: true,
    };
  }
  for (let i = 0; i < 6; i++) regulars.push({ ...(await nodeRequester(100_000 + i, `regular-${i}`, true)), transient: false });

  /**
   * One generated CSR: a requester, a valid template for a target, then 0-3
   * mutations. The first ones are the known attack shapes, unmutated, so that
   * every campaign tries each hostile node name once for each policy.
   */
  async function generate(i: number): Promise<Generated> {
    const hostileNode = i >= 0 && i < 2 * HOSTILE_NODE_NAMES.length;
    const hostileName =
      i >= 2 * HOSTILE_NODE_NAMES.length && i < 2 * HOSTILE_NODE_NAMES.length + HOSTILE_CSR_NAMES.length
        ? HOSTILE_CSR_NAMES[i - 2 * HOSTILE_NODE_NAMES.length]!
        : null;
    const known = hostileNode || hostileName !== null;
    const kind = known
      ? 'node'
      : weighted<RequesterKind>([
          ['node', 78],
          ['token', 11],
          ['user', 11],
        ]);
    const requester =
      hostileName !== null
        ? await nodeRequester(i, `cn-${i}`, true)
        : hostileNode
          ? await nodeRequester(i, HOSTILE_NODE_NAMES[i % HOSTILE_NODE_NAMES.length]!.replace('{i}', String(i)))
          : kind === 'token'
            ? pick(tokens)
            : kind === 'user'
              ? pick(users)
              : chance(0.15)
                ? pick(regulars)
                : await nodeRequester(i);
    const target = known
      ? i < HOSTILE_NODE_NAMES.length || hostileName !== null
        ? 'client'
        : 'serving'
      : weighted<Target>([
          ['client', 55],
          ['serving', 28],
          ['kubelet', 10],
          ['custom', 7],
        ]);
    const node = requester.nodeName ?? (kind === 'user' && requester.username.startsWith('system:node:') ? 'cn-0' : undefined);
    const draft = template(target, node, world);
    // The known shapes must fail on the node name alone, not on a key or lifetime the template drew.
    if (known) Object.assign(draft, { keyKind: 'ecdsa-p256', expirationSeconds: undefined });
    const mutations: string[] = [];
    const n = known || chance(0.4) ? 0 : 1 + Math.floor(rand() * 3);
    for (let k = 0; k < n; k++) mutations.push(mutate(draft, node, `cn-${Math.floor(rand() * COUNT)}`));
    const { name, weird } =
      hostileName !== null
        ? { name: `campaign-${i}-known-${hostileName}`, weird: true }
        : known
          ? { name: `campaign-${i}-known`, weird: false }
          : csrName(i);
    if (weird) mutations.push('name');
    const pem = buildRequestPem({
      subject: draft.subject,
      extensionRequests: [
        [...(draft.sans.length > 0 ? [sanExtension(draft.sans)] : []), ...draft.extensions],
        ...(draft.secondExtensionRequest ? [draft.secondExtensionRequest] : []),
      ].filter((e, j) => j === 0 || e.length > 0),
      key: key(draft.keyKind),
      badSignature: draft.badSignature,
    });
    return {
      id: i,
      name,
      requester,
      target,
      signer: draft.signer,
      usages: draft.usages,
      expirationSeconds: draft.expirationSeconds,
      pem,
      mutations,
    };
  }

  /** The kube-proxy CSR kubeboot itself would send. */
  function validKubeProxyCsr(name: string, requester: Requester): Generated {
    const pem = buildRequestPem({ subject: [[utf8(OIDS.CN, KUBE_PROXY_CN)]], extensionRequests: [], key: key('ecdsa-p256') });
    return {
      id: -1,
      name,
      requester,
      target: 'client',
      signer: SIGNERS.client,
      usages: [DS, CA],
      // A day, as kubeboot asks: short-lived refuses a kube-proxy CSR without one.
      expirationSeconds: 86_400,
      pem,
      mutations: [],
    };
  }

  async function submit(g: Generated): Promise<number> {
    const body = {
      apiVersion: 'certificates.k8s.io/v1',
      kind: 'CertificateSigningRequest',
      metadata: { name: g.name },
      spec: {
        request: Buffer.from(g.pem).toString('base64'),
        signerName: g.signer,
        usages: g.usages,
        ...(g.expirationSeconds !== undefined ? { expirationSeconds: g.expirationSeconds } : {}),
      },
    };
    const res = await g.requester.client.request<{ message?: string }>('POST', CSRS, body);
    if (res.status !== 201)
      refusals.push(
        `${res.status} ${g.requester.kind} ${JSON.stringify(g.requester.username.slice(0, 40))} → ${g.signer}: ${String(res.body?.message ?? '').slice(0, 160)}`,
      );
    return res.status;
  }
  const refusals: string[] = [];

  t.test(
    `${COUNT} generated CSRs: every approval is one the policy table allows (judged on Go's reading), /healthz always within ${HEALTH_BOUND_MS} ms`,
    async (t) => {
      const port = await freePort();
      const approver = startApprover(config, [...POLICY_FLAGS, '--approver-listen', `127.0.0.1:${port}`]);
      let approverStopped = false;
      const stopApprover = async () => {
        if (approverStopped) return approver.done;
        approverStopped = true;
        approver.child.kill('SIGTERM');
        return approver.done;
      };
      t.teardown(stopApprover);
      await approver.waitForOutput(/became the leader/, 60_000);
      const health = probeHealth(port);
      const timeline = await startTimeline(
        plane,
        await plane.mintClientCert({ commonName: 'campaign-timeline', organizations: ['system:masters'] }),
      );
      t.teardown(() => timeline.stop());
      const began = performance.now();

      // ---- the campaign
      const generated: Generated[] = [];
      const created = new Map<string, Generated>();
      const refusedByApi: Record<string, number> = {};
      const CONCURRENCY = 8;
      for (let i = 0; i < COUNT; i += CONCURRENCY) {
        const batch: Generated[] = [];
        for (let j = i; j < Math.min(COUNT, i + CONCURRENCY); j++) batch.push(await generate(j));
        generated.push(...batch);
        const statuses = await Promise.all(batch.map(submit));
        batch.forEach((g, k) => {
          if (statuses[k] === 201) created.set(g.name, g);
          else refusedByApi[String(statuses[k])] = (refusedByApi[String(statuses[k])] ?? 0) + 1;
        });
        await Promise.all(batch.filter((g) => g.requester.transient).map((g) => g.requester.client.close()));
      }
      const submittedMs = performance.now() - began;

      // ---- a burst per node with the signer paused: at most one may be approved and unissued at a time
      plane.signal('kube-controller-manager', 'SIGSTOP');
      const burstNames: string[][] = [];
      let burstApprovals: number[] = [];
      try {
        for (let b = 0; b < BURST_NODES; b++) {
          const requester = await nodeRequester(200_000 + b, `burst-${b}`, true);
          // Names in descending order, all in the same second (finding 4's shape).
          const names = Array.from({ length: BURST_SIZE }, (_, k) => `burst-${b}-${BURST_SIZE - k}`);
          const batch = names.map((name) => validKubeProxyCsr(name, requester));
          // Half the nodes send all at once; the others send the first, and the rest once it is
          // approved (and, the signer being paused, unissued): younger by the clock, smaller by name.
          const [first, ...rest] = batch;
          const statuses = b % 2 === 0 ? await Promise.all(batch.map(submit)) : [await submit(first!)];
          if (b % 2 === 1) {
            await plane.admin
              .waitFor(`${first!.name} approved`, async () => approvedByUs(await plane.admin.getCsr(first!.name)) || undefined, 15_000)
              .catch(() => undefined);
            statuses.push(...(await Promise.all(rest.map(submit))));
          }
          batch.forEach((g, k) => {
            if (statuses[k] === 201) created.set(g.name, g);
          });
          burstNames.push(names);
          await requester.client.close();
        }
        // Until every burst node has an approval and the approver has reported on every other burst CSR.
        await plane.admin
          .waitFor(
            'the approver to decide every burst CSR',
            async () => {
              const all = await plane.admin.listCsrs();
              const byName = new Map(all.map((c) => [c.metadata.name, c]));
              const logged = approver.output();
              const decided = (name: string) => approvedByUs(byName.get(name)) || logged.includes(`"csr":"${name}"`);
              burstApprovals = burstNames.map((names) => names.filter((n) => approvedByUs(byName.get(n))).length);
              return burstNames.every((names, b) => burstApprovals[b]! > 0 && names.every(decided)) ? true : undefined;
            },
            30_000,
          )
          .catch((err: Error) => t.comment(`burst: ${err.message}`));
      } finally {
        plane.signal('kube-controller-manager', 'SIGCONT');
      }

      // ---- settle: a marker from a fresh node is approved after everything queued before it,
      // then approvals may still trickle in (re-checks); the books close when the approver stops.
      const markerNode = await nodeRequester(300_000, 'marker', true);
      expectStatus(
        { status: await submit(validKubeProxyCsr('campaign-marker', markerNode)), body: undefined, headers: {} },
        'create the marker CSR',
        201,
      );
      await markerNode.client.close();
      let lastCount = -1;
      let stableSince = performance.now();
      await plane.admin
        .waitFor(
          'approvals to settle',
          async () => {
            const all = await plane.admin.listCsrs();
            const count = all.filter((c) => approvedByUs(c)).length;
            const markerDone = all.some((c) => c.metadata.name === 'campaign-marker' && c.status?.certificate);
            if (count !== lastCount) (lastCount = count), (stableSince = performance.now());
            return markerDone && performance.now() - stableSince > 5_000 ? true : undefined;
          },
          SETTLE_MS,
        )
        .catch((err: Error) => t.comment(`settle: ${err.message}`));

      // The probes stop first: a stopping approver rightly answers 503.
      const probes = await health.stop();
      const stopped = await stopApprover();
      await timeline.stop();
      assertNoSecrets(t, stopped.stdout + stopped.stderr, 'kubeboot approver');
      // What kept the approver busy: its retries, by error (the CSR's name taken out).
      const retries = new Map<string, number>();
      for (const line of (stopped.stdout + stopped.stderr).split('\n')) {
        if (!line.includes('could not decide on CSR')) continue;
        try {
          const entry = JSON.parse(line) as { error?: string; csr?: string };
          const name = entry.csr ?? '\u0000';
          const error = String(entry.error).replace(name, '<name>').replace(encodeURIComponent(name), '<name>');
          const key = `${error.length > 240 ? `${error.slice(0, 120)} … ${error.slice(-120)}` : error} (name of ${name.length} chars)`;
          retries.set(key, (retries.get(key) ?? 0) + 1);
        } catch {
          retries.set('(unparsable log line)', (retries.get('(unparsable log line)') ?? 0) + 1);
        }
      }
      for (const [error, n] of [...retries].sort((a, b) => b[1] - a[1]).slice(0, 6)) t.comment(`approver retried ${n}x: ${error}`);

      // ---- the books
      const all = (await plane.admin.listCsrs()).filter((c) => created.has(c.metadata.name) || c.metadata.name === 'campaign-marker');
      const views = await goViews(
        certview,
        all.map((c) => ({ id: c.metadata.name, request: c.spec.request ?? '', certificate: c.status?.certificate ?? '' })),
      );
      const category = (c: KubeObject) => {
        const g = created.get(c.metadata.name);
        return `${g?.requester.kind ?? 'node'}→${c.spec.signerName.replace('kubernetes.io/', '')}`;
      };
      const table: Record<
        string,
        { created: number; approvedByKubeboot: number; approvedByOthers: number; deniedOrFailed: number; pending: number }
      > = {};
      const violations: { name: string; requester: string; signer: string; mutations: string[]; problems: string[] }[] = [];
      let modelAllows = 0;
      for (const c of all) {
        const row = (table[category(c)] ??= { created: 0, approvedByKubeboot: 0, approvedByOthers: 0, deniedOrFailed: 0, pending: 0 });
        row.created++;
        const conditions = (c.status?.conditions ?? []) as KubeObject[];
        const problems = policyProblems(c, views.get(c.metadata.name) ?? {}, world, MODEL);
        if (problems.length === 0) modelAllows++;
        if (conditions.some(isKubebootApproval)) {
          row.approvedByKubeboot++;
          if (problems.length > 0) {
            const g = created.get(c.metadata.name);
            violations.push({
              name: JSON.stringify(c.metadata.name.slice(0, 80)),
              requester: c.spec.username,
              signer: c.spec.signerName,
              mutations: g?.mutations ?? [],
              problems,
            });
          }
        } else if (conditions.some((x) => x.type === 'Approved')) row.approvedByOthers++;
        else if (conditions.some((x) => x.type === 'Denied' || x.type === 'Failed')) row.deniedOrFailed++;
        else row.pending++;
      }
      const approvedByKubeboot = Object.values(table).reduce((s, r) => s + r.approvedByKubeboot, 0);
      const slowest = Math.max(0, ...probes.map((p) => p.ms));
      const failures = probes.filter((p) => p.failure !== undefined).map((p) => p.failure);
      t.comment(
        `campaign: ${generated.length} generated + ${BURST_NODES * BURST_SIZE} burst + 1 marker; ${all.length} accepted by the API server, refused: ${JSON.stringify(refusedByApi)}; submitted in ${Math.round(submittedMs / 1000)} s`,
      );
      for (const [cat, row] of Object.entries(table).sort()) t.comment(`  ${cat}: ${JSON.stringify(row)}`);
      for (const r of refusals.filter((x) => x.includes('system:node:')).slice(0, 12)) t.comment(`  refused: ${r}`);
      t.comment(
        `approved by kubeboot: ${approvedByKubeboot}; the policy model allows ${modelAllows}; timeline: ${timeline.events} events; burst approvals per node while the signer was paused: ${JSON.stringify(burstApprovals)}`,
      );
      const slow = probes
        .filter((p) => p.ms > HEALTH_BOUND_MS)
        .map((p) => [Math.round(p.ms), Math.round((p.at - performance.timeOrigin - began) / 100) / 10]);
      t.comment(
        `/healthz: ${probes.length} probes, slowest ${Math.round(slowest)} ms, ${failures.length} failed; slow ones (ms, at s into the campaign): ${JSON.stringify(slow)}`,
      );
      const known = all.filter((c) => c.metadata.name.endsWith('-known'));
      const namedAttack = all.filter((c) => c.metadata.name.includes('-known-'));
      t.comment(
        `hostile CSR names on valid CSRs: ${namedAttack.length} accepted by the API server, ${namedAttack.filter((c) => approvedByUs(c)).length} approved`,
      );
      t.comment(
        `hostile node names, unmutated kube-proxy and serving CSRs: ${known.length} accepted by the API server, approved by kubeboot: ${JSON.stringify(known.filter((c) => approvedByUs(c)).map((c) => `${c.spec.username} ${c.spec.signerName}`))}`,
      );

      t.same(violations.slice(0, 20), [], `no approval outside the policy table (${violations.length} in all)`);
      t.same(
        timeline.overlaps.slice(0, 10),
        [],
        `no node ever held two approved, unissued kube-proxy CSRs (${timeline.overlaps.length} moments)`,
      );
      t.ok(slowest <= HEALTH_BOUND_MS, `every /healthz probe answered within ${HEALTH_BOUND_MS} ms (slowest ${Math.round(slowest)} ms)`);
      t.same(failures.slice(0, 5), [], 'no /healthz probe failed');
      t.ok(probes.length > 20, `${probes.length} probes over the campaign`);
      // A campaign that approves nothing proves nothing.
      t.ok(approvedByKubeboot >= Math.min(20, COUNT / 10), `${approvedByKubeboot} approvals to judge`);
      t.ok(
        all.some((c) => c.metadata.name === 'campaign-marker' && approvedByUs(c)),
        'the marker CSR, filed last, was approved',
      );
      await Promise.all([...users, ...tokens, ...regulars].map((r) => r.client.close()));
    },
  );
}
