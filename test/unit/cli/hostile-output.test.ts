// What the commands print when the cluster's text is hostile: a node writes
// its own kubeboot.io/ca-rotation annotation (and, faking an API, its name),
// anyone who can write Secrets in kube-system writes a token's description.
// None of it may steer the admin's terminal (ESC/CSI, OSC title, C1 CSI) or
// forge a line (CR, LF, U+2028); long runs are cut; JSON output still parses.
// The commands run whole, against an HTTPS server answering as an API server.
import { mkdirSync, writeFileSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import t, { type Test } from 'tap';
import { runCaRotation } from '../../../agent/cli/ca-rotation.js';
import { runStatus } from '../../../agent/cli/status.js';
import { runToken } from '../../../agent/cli/token.js';
import { defaultConfig } from '../../../agent/config/defaults.js';
import { ExitCode } from '../../../agent/errors.js';
import { terminalJson, terminalLines } from '../../../agent/text.js';
import { trustedBundle } from '../../../agent/trust/bundle.js';
import { clusterInfoKubeconfig, writeKubeconfig } from '../../support/kubeconfig.js';
import { HOSTILE, HOSTILE_PIECES, LONG, RAW } from '../../support/hostile.js';
import { createClusterPki } from '../../support/pki.js';

const pki = await createClusterPki();
const bundle = trustedBundle(pki.ca.certPem);
const pin = bundle.pins[0]!;

/** An API server on 127.0.0.1 serving `routes` (path without query → JSON body), and an admin kubeconfig for it. */
async function apiServer(t: Test, routes: Record<string, unknown>): Promise<string> {
  const server = createServer({ cert: pki.apiserverServing.certPem, key: pki.apiserverServing.keyPem }, (req, res: ServerResponse) => {
    const body = routes[new URL(req.url ?? '/', 'https://x').pathname];
    res.writeHead(body === undefined ? 404 : 200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body ?? { kind: 'Status', status: 'Failure', reason: 'NotFound', code: 404 }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => (server.closeAllConnections(), server.close(() => resolve()))));
  const url = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const file = join(t.testdir(), 'admin.kubeconfig');
  await writeKubeconfig(file, url, { pem: pki.ca.certPem }, pki.admin);
  return file;
}

/** What the command writes to stdout while it runs. */
async function stdoutOf(run: () => Promise<number>): Promise<{ code: number; out: string }> {
  const write = process.stdout.write;
  let out = '';
  process.stdout.write = ((chunk: string | Uint8Array) => {
    out += typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
    return true;
  }) as typeof process.stdout.write;
  try {
    return { code: await run(), out };
  } finally {
    process.stdout.write = write;
  }
}

function assertSafe(t: Test, out: string, what: string): void {
  const at = out.search(RAW);
  t.equal(at, -1, `${what}: no raw control character${at === -1 ? '' : ` (U+${out.charCodeAt(at).toString(16)} at ${at})`}`);
  t.ok(out.endsWith('\n'), `${what}: ends its last line`);
  const longest = Math.max(...out.split('\n').map((l) => l.length));
  t.ok(longest < 2000, `${what}: every line bounded (longest ${longest})`);
}

const note = (o: unknown) => ({ 'kubeboot.io/ca-rotation': JSON.stringify(o) });
const NODES = [
  { name: `evil\x1b[2J${HOSTILE}`, annotations: note({ bundle: 'other', active: false, issuers: {}, refused: HOSTILE }) },
  { name: 'long', annotations: note({ bundle: bundle.hash, active: true, issuers: {}, refused: `${LONG}\x1b]0;pwned\x07` }) },
  { name: `L${LONG}`, annotations: {} },
  {
    name: 'issuers',
    annotations: note({ bundle: bundle.hash, active: true, issuers: { [`kubelet${HOSTILE}`]: 'sha256:00' }, refused: null }),
  },
  { name: 'not-an-object', annotations: { 'kubeboot.io/ca-rotation': 'null' } },
  { name: 'no-tostring', annotations: note({ bundle: 'other', refused: { toString: 1, say: '\u009b2J' } }) },
  { name: 'ready', annotations: note({ bundle: bundle.hash, active: true, issuers: { kubelet: pin }, refused: null }) },
];

async function caRotationCluster(t: Test): Promise<string> {
  return apiServer(t, {
    '/api/v1/namespaces/kube-public/configmaps/cluster-info': {
      kind: 'ConfigMap',
      metadata: { name: 'cluster-info', namespace: 'kube-public', annotations: { 'kubeboot.io/signer-ca-hash': pin } },
      data: { kubeconfig: clusterInfoKubeconfig('https://127.0.0.1:6443', bundle.pem) },
    },
    '/api/v1/nodes': { kind: 'NodeList', items: NODES.map((metadata) => ({ metadata })) },
  });
}

t.test('ca-rotation status: node annotations and names reach the terminal escaped, one line per lagging node', async (t) => {
  const kubeconfig = await caRotationCluster(t);
  const { code, out } = await stdoutOf(() => runCaRotation(['status'], { kubeconfig }, 'text', {}));
  t.equal(code, ExitCode.other, 'not ready: the hostile nodes lag');
  assertSafe(t, out, 'text');
  const lines = out.slice(0, -1).split('\n');
  t.equal(lines.length, 1 + 6 + 1, 'a summary, the six lagging nodes, the verdict: no forged line');
  t.match(lines[0], /^3\/7 node\(s\) trust and use the published CA bundle; 1\/7 hold certificates under the signer CA$/);
  t.equal(lines.at(-1), 'not every node is ready yet');
  t.ok(
    lines.slice(1, -1).every((l) => l.startsWith('  ')),
    'every node line is indented as the renderer writes it',
  );
  const evil = lines.find((l) => l.startsWith('  evil'))!;
  t.match(evil, 'evil\\u001b[2J', 'ESC shown as text');
  t.match(evil, 'refuses the published bundle: \\u001b[2J\\u001b[H \\u001b]0;pwned\\u0007 nul\\u0000here \\rok', 'OSC, NUL, CR shown');
  t.match(evil, '\\nevery node is ready for the next step \\u009b31m line\\u2028sep\\u2029 del\\u007f', 'LF, C1, U+2028/9, DEL shown');
  t.match(out, /\n {2}long: refuses the published bundle: A+…\(\d+ more characters\)\n/, 'a long refusal is cut and says so');
  t.match(out, /\n {2}LA+…\(\d+ more characters\): no kubeboot\.io\/ca-rotation annotation/, 'a long name too');
  t.match(out, /\n {2}issuers: still holds kubelet\\u001b\[2J.* certificate\(s\) from another CA/);
  t.match(out, '  not-an-object: kubeboot.io/ca-rotation is not a JSON object');
  t.match(out, '  no-tostring: refuses the published bundle: {"toString":1,"say":"\\u009b2J"}', 'any JSON value is shown, none crashes it');
  t.notMatch(out, /\bready:/, 'the ready node is not listed');
});

t.test('ca-rotation status --output json: valid JSON, no raw control character, the same nodes lagging', async (t) => {
  const kubeconfig = await caRotationCluster(t);
  const { code, out } = await stdoutOf(() => runCaRotation(['status'], { kubeconfig }, 'json', {}));
  t.equal(code, ExitCode.other);
  assertSafe(t, out, 'json');
  const parsed = JSON.parse(out) as { nodes: { name: string; lag: string | null }[]; ready: boolean };
  t.equal(parsed.ready, false);
  t.equal(parsed.nodes.length, 7);
  t.equal(parsed.nodes.filter((n) => n.lag !== null).length, 6);
  const evil = parsed.nodes[0]!;
  t.equal(evil.name.slice(0, 14), 'evil\\u001b[2J\\', 'the name as the text view shows it');
  t.match(evil.lag, /^refuses the published bundle: \\u001b\[2J/);
  t.notOk(RAW.test(JSON.stringify(parsed)), 'no control character even once parsed');
  t.ok(
    parsed.nodes.every((n) => n.name.length < 300 && (n.lag ?? '').length < 600),
    'every field bounded',
  );
});

t.test('token list: a Secret description, groups and expiration are escaped in the table, faithful in JSON', async (t) => {
  const b64 = (s: string) => Buffer.from(s).toString('base64');
  const description = `${HOSTILE}${LONG}`;
  const kubeconfig = await apiServer(t, {
    '/api/v1/namespaces/kube-system/secrets': {
      kind: 'SecretList',
      items: [
        {
          metadata: { name: 'bootstrap-token-abcdef' },
          data: {
            'token-id': b64('abcdef'),
            expiration: b64('2030-01-01T00:00:00Z\x1b[2J'),
            'usage-bootstrap-authentication': b64('true'),
            'auth-extra-groups': b64('system:bootstrappers:x\u009b,system:bootstrappers:a\rforged'),
            description: b64(description),
          },
        },
      ],
    },
  });
  const text = await stdoutOf(() => runToken(['list'], { kubeconfig }, 'text', {}));
  t.equal(text.code, ExitCode.ok);
  assertSafe(t, text.out, 'table');
  const rows = text.out.slice(0, -1).split('\n');
  t.equal(rows.length, 2, 'a header and one row');
  t.match(
    rows[1],
    /^abcdef {2}2030-01-01T00:00:00Z\\u001b\[2J {2}authentication {2}system:bootstrappers:x\\u009b,system:bootstrappers:a\\rforged {2}/,
  );
  t.match(rows[1], /\\u001b\]0;pwned\\u0007.*…\(\d+ more characters\)$/, 'the description escaped and cut');
  t.equal(rows[0]!.indexOf('DESCRIPTION'), rows[1]!.indexOf('\\u001b[2J\\u001b[H'), 'columns measured on what is shown');

  const json = await stdoutOf(() => runToken(['list'], { kubeconfig }, 'json', {}));
  t.notOk(RAW.test(json.out), 'json: no raw control character');
  const [token] = JSON.parse(json.out) as { description: string; groups: string[] }[];
  t.equal(token!.description, description, 'JSON keeps the value exact: escapes, not changes');
  t.same(token!.groups, ['system:bootstrappers:x\u009b', 'system:bootstrappers:a\rforged']);
});

t.test("status: the daemon's last error (an API server's or approver's words) is escaped", async (t) => {
  const dir = t.testdir();
  const c = defaultConfig('n1');
  c.stateDir = join(dir, 'state');
  c.kubeProxy = { ...c.kubeProxy, enabled: false };
  c.kubelet = { ...c.kubelet, kubeconfig: join(dir, 'kubelet.conf'), certDir: join(dir, 'pki'), configFile: join(dir, 'kc.yaml') };
  mkdirSync(c.stateDir);
  const lastError = `CSR node-csr-x denied by mallory: ${HOSTILE_PIECES.join('')}`;
  writeFileSync(
    join(dir, 'state', 'status.json'),
    JSON.stringify({
      pid: 1,
      updated: '2030-01-01T00:00:00Z',
      identities: { kubelet: { nextRenewal: null, lastSuccess: null, lastError, pendingCsr: null, lastHooks: [] } },
    }),
  );
  for (const output of ['text', 'json'] as const) {
    const out = new PassThrough();
    let written = '';
    out.on('data', (d: Buffer) => {
      written += d.toString();
    });
    await runStatus(c, output, out);
    assertSafe(t, written, output);
    if (output === 'text') t.match(written, /\n {2}last error: {3}CSR node-csr-x denied by mallory: \\u001b\[2J\\u001b\[H\\u001b\]0;pwned/);
    else t.equal((JSON.parse(written) as { identities: { daemon: { lastError: string } }[] }).identities[0]!.daemon.lastError, lastError);
  }
});

t.test('the printing choke point: lines escaped but for their separators; JSON valid and the same value', async (t) => {
  t.equal(terminalLines(['a\x1b[2Jb', 'c\nd', 'e\u2028']), 'a\\u001b[2Jb\nc\\nd\ne\\u2028\n');
  const value = { s: `${HOSTILE}\u0085\u009f\u00a0é😀`, n: 1, list: ['\x7f'] };
  const json = terminalJson(value);
  t.notOk(RAW.test(json));
  t.same(JSON.parse(json), value);
  t.match(json, '\\u0085\\u009f\u00a0é😀', 'only controls escaped; other text stays as it is');
});
