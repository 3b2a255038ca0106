// The fault campaign's "mutated inputs" leg, as part of the suite: a few
// hundred deterministic mutations (seeded PRNG) of a valid bootstrap
// kubeconfig, client kubeconfig and config file go through the parsers
// in-process, and a sample through `kubeboot check` as a process. Every one
// must end in a bounded way: accepted, or one line naming the file and
// field with exit code 2; never a stack, a secret, a hang or a memory blow-up,
// and `check` deletes nothing. KUBEBOOT_CHAOS=1 (npm run test:chaos) runs
// many more.
import t from 'tap';
import { spawn } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { loadConfig } from '../../agent/config/load.js';
import { KubebootError } from '../../agent/errors.js';
import { parseBootstrapKubeconfig, parseClientKubeconfig } from '../../agent/kubeconfig/parse.js';
import { caCertHash } from '../../agent/pki/pin.js';
import { bundle } from '../support/kubeboot.js';
import { createCa, issueLeaf } from '../support/pki.js';
import { prng } from '../support/prng.js';

const long = process.env.KUBEBOOT_CHAOS === '1';
const IN_PROCESS = Number(process.env.KUBEBOOT_CHAOS_MUTATIONS ?? (long ? 5_000 : 300));
const AS_PROCESS = Number(process.env.KUBEBOOT_CHAOS_PROCESSES ?? (long ? 300 : 24));
const SEED = Number(process.env.KUBEBOOT_CHAOS_SEED ?? 0x6b756265);
/** Per parse; the slowest legitimate input here parses in a few milliseconds. */
const PARSE_BUDGET_MS = 1_000;
/** Per `kubeboot check`, which also tries to reach an API server that refuses at once. */
const PROCESS_BUDGET_MS = 15_000;
/** Old-space cap for the child: an input that blows memory up crashes it (exit 134), which fails the test. */
const HEAP_MB = 96;

const SECRET = 'kq2m7x9p4c1z8w3v';
const TOKEN = `abcdef.${SECRET}`;
const b64 = (s: string): string => Buffer.from(s).toString('base64');
// Real certificates, so that an unmutated input gets as far as the network (exit 1) in `check`.
const ca = await createCa('kubernetes');
const node = await issueLeaf(ca, { commonName: 'system:node:worker-1', organizations: ['system:nodes'], usage: 'client' });
const CA = ca.certPem;
const KEY = node.keyPem;
const KEY_BODY = KEY.replace(/-----[A-Z ]+-----|\s/g, '');

/** Any 10 characters of a secret in a message count as a leak (a mutation may have changed the rest). */
const forbidden = [SECRET, KEY_BODY, b64(KEY)].flatMap((s) => Array.from({ length: s.length - 9 }, (_, i) => s.slice(i, i + 10)));

const bootstrapKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: kubernetes
  cluster:
    certificate-authority-data: ${b64(CA)}
    server: https://127.0.0.1:1
contexts:
- name: tls-bootstrap-token-user@kubernetes
  context: {cluster: kubernetes, user: tls-bootstrap-token-user}
current-context: tls-bootstrap-token-user@kubernetes
users:
- name: tls-bootstrap-token-user
  user:
    token: ${TOKEN}
`;

const clientKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: default-cluster
  cluster:
    certificate-authority: ca.crt
    server: https://127.0.0.1:1
contexts:
- name: default-context
  context: {cluster: default-cluster, namespace: default, user: default-auth}
current-context: default-context
users:
- name: default-auth
  user:
    client-certificate-data: ${b64(node.certPem)}
    client-key-data: ${b64(KEY)}
`;

const configFile = `bootstrapKubeconfig: bootstrap-kubelet.conf
stateDir: state
nodeName: worker-1
keyAlgorithm: ecdsa-p256
caCertHashes: ["${caCertHash(CA)}"]
kubelet:
  kubeconfig: kubelet.conf
  certDir: pki
  hooks: [["/bin/true", "--reload"]]
kubeProxy: {enabled: false}
waitTimeout: 3m
renewal: {margin: 1h, reuseKey: false, hookTimeout: 30s}
listen: "off"
log: {level: info, format: json}
`;

const JUNK = [
  ':',
  '[',
  ']',
  '{',
  '}',
  '&a ',
  '*a',
  '!!str ',
  '|',
  '>',
  '- ',
  '? ',
  "'",
  '"',
  '#',
  '\n',
  '\t',
  ' ',
  ',',
  '%',
  '@',
  '`',
  '\\',
  'é',
  '\u0000',
  '\uFEFF',
  '\u2028',
  '~',
  'null',
  'true',
  '0x1F',
  '1e400',
  '<<: *a',
];

/** One to three edits of `text`, chosen by `rand`. */
function mutate(text: string, rand: () => number): string {
  const pick = <T>(list: readonly T[]): T => list[Math.floor(rand() * list.length)]!;
  const at = (s: string) => Math.floor(rand() * (s.length + 1));
  const edits: ((s: string) => string)[] = [
    (s) => {
      const i = at(s);
      return s.slice(0, i) + String.fromCharCode(s.charCodeAt(i) ^ (1 << Math.floor(rand() * 7))) + s.slice(i + 1);
    },
    (s) => {
      const i = at(s);
      return s.slice(0, i) + s.slice(i + 1 + Math.floor(rand() * 40));
    },
    (s) => {
      const i = at(s);
      const n = Math.floor(rand() * 80);
      return s.slice(0, i) + s.slice(i, i + n).repeat(1 + Math.floor(rand() * 4)) + s.slice(i);
    },
    (s) => {
      const i = at(s);
      return s.slice(0, i) + pick(JUNK) + s.slice(i);
    },
    (s) => s.slice(0, at(s)),
    (s) => {
      const lines = s.split('\n');
      const i = Math.floor(rand() * lines.length);
      const j = Math.floor(rand() * lines.length);
      [lines[i], lines[j]] = [lines[j]!, lines[i]!];
      return lines.join('\n');
    },
    (s) => {
      const lines = s.split('\n');
      const i = Math.floor(rand() * lines.length);
      lines[i] = ' '.repeat(1 + Math.floor(rand() * 6)) + lines[i];
      return lines.join('\n');
    },
    (s) => s.replace(/: [^\n]+/g, (m) => (rand() < 0.15 ? `: ${pick(JUNK)}${pick(JUNK)}` : m)),
    (s) => {
      const i = at(s);
      const n = 1 + Math.floor(rand() * 3000);
      return s.slice(0, i) + (rand() < 0.5 ? '['.repeat(n) : '- '.repeat(n)) + s.slice(i);
    },
    (s) => `a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n${s}`,
    (s) => s.replace(/: [^\n]+/, (m) => `: ${'x'.repeat(1 + Math.floor(rand() * 200_000))}${m.slice(2)}`),
    (s) => s.replace(TOKEN, (m) => m.slice(0, 10) + pick(['ü', ' ', '\u0001', 'Ä', '.', '..', '-']) + m.slice(11)),
    (s) => s.replace(/\n/g, (m) => (rand() < 0.1 ? '\r\n' : m)),
  ];
  let out = text;
  for (let n = 1 + Math.floor(rand() * 3); n > 0; n--) out = pick(edits)(out);
  return out;
}

interface Problem {
  input: number;
  problem: string;
}

/** What is wrong with how a parse ended, or null when it ended well. */
function judge(outcome: { error?: unknown }, ms: number): string | null {
  if (ms > PARSE_BUDGET_MS) return `took ${Math.round(ms)} ms`;
  if (!('error' in outcome)) return null;
  const err = outcome.error;
  if (!(err instanceof KubebootError)) return `threw ${(err as Error)?.name}: ${(err as Error)?.message}`;
  if (err.code !== 2) return `exit code ${err.code} for bad input: ${err.message}`;
  if (/\n/.test(err.message)) return `message is not one line: ${JSON.stringify(err.message.slice(0, 200))}`;
  if (/\n\s+at /.test(err.message)) return 'message carries a stack';
  if (err.message.length > 1_000) return `message is ${err.message.length} characters: ${JSON.stringify(err.message.slice(0, 160))}`;
  const leak = forbidden.find((f) => err.message.includes(f));
  if (leak) return `message leaks secret material: ${JSON.stringify(err.message.slice(0, 200))}`;
  return null;
}

async function timed(run: () => Promise<unknown>): Promise<{ outcome: { error?: unknown }; ms: number }> {
  const started = performance.now();
  try {
    await run();
    return { outcome: {}, ms: performance.now() - started };
  } catch (error) {
    return { outcome: { error }, ms: performance.now() - started };
  }
}

const kinds = {
  'bootstrap kubeconfig': (text: string) => parseBootstrapKubeconfig('/etc/kubernetes/bootstrap-kubelet.conf', text, async () => null),
  'client kubeconfig': (text: string) =>
    parseClientKubeconfig('/etc/kubernetes/kubelet.conf', text, async (p) => (p === '/etc/kubernetes/ca.crt' ? CA : null)),
  'config file': (text: string) =>
    loadConfig({
      argv: ['check', '--config', '/etc/kubeboot/config.yaml'],
      env: {},
      readFile: async (p) => (p === '/etc/kubeboot/config.yaml' ? text : null),
      hostname: 'worker-1',
    }),
};
const bases: Record<keyof typeof kinds, string> = {
  'bootstrap kubeconfig': bootstrapKubeconfig,
  'client kubeconfig': clientKubeconfig,
  'config file': configFile,
};

t.test('the unmutated inputs are valid, so every failure below comes from a mutation', async (t) => {
  for (const [kind, parse] of Object.entries(kinds)) {
    await t.resolves((parse as (text: string) => Promise<unknown>)(bases[kind as keyof typeof kinds]), kind);
  }
});

for (const [kind, parse] of Object.entries(kinds)) {
  t.test(`${IN_PROCESS} mutated ${kind}s each end accepted or in one line naming the file, exit 2, in bounded time`, async (t) => {
    const rand = prng(SEED ^ kind.length);
    const problems: Problem[] = [];
    let refused = 0;
    for (let i = 0; i < IN_PROCESS; i++) {
      const text = mutate(bases[kind as keyof typeof kinds], rand);
      const { outcome, ms } = await timed(() => parse(text));
      if ('error' in outcome) refused++;
      const problem = judge(outcome, ms);
      if (problem !== null) problems.push({ input: i, problem });
    }
    t.same(problems.slice(0, 10), [], `no badly ended parse (${problems.length} in all)`);
    t.comment(`${kind}: ${IN_PROCESS - refused} accepted, ${refused} refused`);
    // A campaign where nothing is refused tests nothing.
    t.ok(refused > IN_PROCESS / 10, `mutations were refused ${refused} times`);
  });
}

/** Runs `kubeboot check` with a heap cap; resolves with how it ended. */
function check(config: string): Promise<{ code: number | null; signal: string | null; stdout: string; stderr: string; ms: number }> {
  const started = performance.now();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [`--max-old-space-size=${HEAP_MB}`, bundle, 'check', '--config', config], {
      env: { PATH: process.env.PATH, KUBEBOOT_LOG_FORMAT: 'json' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), PROCESS_BUDGET_MS);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, ms: performance.now() - started });
    });
  });
}

/** Every file under `dir` with its content, to prove `check` changed nothing. */
function snapshot(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const entry of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    if (entry.isFile()) out[path.join(entry.parentPath, entry.name)] = readFileSync(path.join(entry.parentPath, entry.name), 'latin1');
  }
  return out;
}

t.test(
  `${AS_PROCESS} mutated inputs through kubeboot check: exit 0, 1 or 2, one line on stderr at most, no stack, bounded time and memory, nothing deleted`,
  async (t) => {
    const rand = prng(SEED);
    const dir = t.testdir();
    const problems: Problem[] = [];
    const codes: Record<string, number> = {};
    for (let i = 0; i < AS_PROCESS; i++) {
      const node = path.join(dir, `node-${i}`);
      mkdirSync(node);
      const which = i % 3;
      writeFileSync(path.join(node, 'config.yaml'), which === 0 ? mutate(configFile, rand) : configFile);
      writeFileSync(path.join(node, 'bootstrap-kubelet.conf'), which === 1 ? mutate(bootstrapKubeconfig, rand) : bootstrapKubeconfig);
      writeFileSync(path.join(node, 'ca.crt'), CA);
      writeFileSync(path.join(node, 'kubelet.conf'), which === 2 ? mutate(clientKubeconfig, rand) : clientKubeconfig);
      const before = snapshot(node);
      const r = await check(path.join(node, 'config.yaml'));
      const output = r.stdout + r.stderr;
      codes[String(r.code ?? r.signal)] = (codes[String(r.code ?? r.signal)] ?? 0) + 1;
      const problem =
        r.code === null || ![0, 1, 2].includes(r.code)
          ? `ended with ${r.code ?? r.signal}: ${r.stderr.slice(0, 300)}`
          : r.ms > PROCESS_BUDGET_MS
            ? `took ${Math.round(r.ms)} ms`
            : r.stderr.trim().split('\n').length > 1
              ? `stderr has several lines: ${JSON.stringify(r.stderr.slice(0, 300))}`
              : /\n\s+at /.test(output)
                ? 'printed a stack'
                : forbidden.some((f) => output.includes(f))
                  ? 'printed secret material'
                  : JSON.stringify(snapshot(node)) !== JSON.stringify(before)
                    ? 'changed or deleted files'
                    : null;
      if (problem !== null) problems.push({ input: i, problem });
    }
    t.same(problems.slice(0, 10), [], `no badly ended check (${problems.length} in all)`);
    t.comment(`exit codes: ${JSON.stringify(codes)}`);
  },
);
