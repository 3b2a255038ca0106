// A node writes its own kubeboot.io/ca-rotation annotation, and whatever it
// writes the real API server stores and `kubeboot ca-rotation status` shows
// the admin. Against a real control plane: Nodes whose annotation says they
// refuse the bundle in ESC/CSI, OSC, NUL, CR/LF, C1, U+2028 and a 100,000
// character run, and a bootstrap token Secret described the same way. The
// admin's terminal gets every one of them escaped, each node on its one line
// and still reported as lagging; the JSON output parses.
import t, { type Test } from 'tap';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { KubeObject } from '../support/admin.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { expectStatus } from '../support/http.js';
import { kubeboot, type RunResult } from '../support/kubeboot.js';
import { HOSTILE, LONG, RAW } from '../support/hostile.js';
import { writeKubeconfig } from '../support/kubeconfig.js';

const ANNOTATION = 'kubeboot.io/ca-rotation';

const plane = await controlPlaneOrSkip(t, { name: 'hostile-annotations' });
if (plane) {
  const admin = plane.admin;
  const kubeconfig = join(plane.dir, 'admin-hostile.kubeconfig');
  await writeKubeconfig(
    kubeconfig,
    plane.server,
    { pem: plane.caPem },
    await plane.mintClientCert({
      commonName: 'kubeboot-admin',
      organizations: ['system:masters'],
    }),
  );

  const createNode = async (name: string, annotations: Record<string, string>) =>
    admin.request('POST', '/api/v1/nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name, annotations } });
  const note = (refused: unknown) => JSON.stringify({ bundle: 'sha256:not-the-published-one', active: false, issuers: {}, refused });
  // The node's words decode to these control characters; in the annotation's
  // bytes C0 is JSON-escaped, DEL, C1 and U+2028/9 are raw.
  expectStatus(await createNode('hostile-escapes', { [ANNOTATION]: note(HOSTILE) }), 'create hostile-escapes', 201);
  expectStatus(await createNode('hostile-long', { [ANNOTATION]: note(`${LONG}\x1b]0;pwned\x07`) }), 'create hostile-long', 201);
  expectStatus(await createNode('hostile-object', { [ANNOTATION]: note({ toString: 1, say: '\u009b2J' }) }), 'create hostile-object', 201);
  // A raw NUL byte in the annotation value itself (no JSON escape).
  const rawNul = await createNode('hostile-raw-nul', { [ANNOTATION]: `{"refused":"nul\x00\x1b[2J"}` });
  const lagging = ['hostile-escapes', 'hostile-long', 'hostile-object'];
  if (rawNul.status === 201) lagging.push('hostile-raw-nul');
  else t.equal(rawNul.status, 422, 'the API server refuses a raw NUL in an annotation value, or keeps it');

  t.test('the API server keeps what the node wrote, and refuses control characters in a Node name', async (t) => {
    const node = (await admin.request<KubeObject>('GET', '/api/v1/nodes/hostile-escapes')).body;
    const stored = JSON.parse((node.metadata.annotations as Record<string, string>)[ANNOTATION]!) as { refused: string };
    t.equal(stored.refused, HOSTILE, 'stored as written: escaping is up to whoever prints it');
    const named = await createNode('evil\x1b[2J', {});
    t.equal(named.status, 422, 'a Node name is a DNS subdomain: no ESC');
  });

  const assertSafe = (t: Test, r: RunResult, what: string) => {
    for (const [stream, text] of [
      ['stdout', r.stdout],
      ['stderr', r.stderr],
    ] as const) {
      const at = text.search(RAW);
      t.equal(at, -1, `${what} ${stream}: no raw control character${at === -1 ? '' : ` (U+${text.charCodeAt(at).toString(16)} at ${at})`}`);
      const longest = Math.max(...text.split('\n').map((l) => l.length));
      t.ok(longest < 2000, `${what} ${stream}: every line bounded (longest ${longest})`);
    }
  };

  t.test('ca-rotation status: every hostile node on one escaped line, still lagging', async (t) => {
    const r = await kubeboot(t, ['ca-rotation', 'status', '--kubeconfig', kubeconfig]);
    t.equal(r.code, 1, 'not ready while nodes lag');
    assertSafe(t, r, 'status');
    const lines = r.stdout.replace(/\n$/, '').split('\n');
    t.match(lines[0], /^0\/\d+ node\(s\) trust and use the published CA bundle/);
    t.equal(lines.at(-1), 'not every node is ready yet', 'the verdict is the last line: no forged one after it');
    const shown = lines.slice(1, -1);
    t.ok(
      shown.every((l) => /^ {2}[a-z0-9.-]+: /.test(l)),
      'every other line is one node, as the renderer writes it',
    );
    const line = (name: string) => shown.find((l) => l.startsWith(`  ${name}: `));
    t.match(
      line('hostile-escapes'),
      'refuses the published bundle: \\u001b[2J\\u001b[H \\u001b]0;pwned\\u0007 nul\\u0000here \\rok  every node is ready for the next step \\nevery node is ready for the next step \\u009b31m line\\u2028sep\\u2029 del\\u007f',
    );
    t.match(
      line('hostile-long'),
      /^ {2}hostile-long: refuses the published bundle: A+…\(\d+ more characters\)$/,
      'a long run is cut, and says so',
    );
    t.match(line('hostile-object'), 'refuses the published bundle: {"toString":1,"say":"\\u009b2J"}');
    if (rawNul.status === 201) t.match(line('hostile-raw-nul'), 'hostile-raw-nul: kubeboot.io/ca-rotation is not a JSON object');
    t.equal(shown.filter((l) => lagging.some((n) => l.startsWith(`  ${n}: `))).length, lagging.length, 'each hostile node once');
  });

  t.test('ca-rotation status --output json: parses, no raw control character, the same nodes lagging', async (t) => {
    const r = await kubeboot(t, ['ca-rotation', 'status', '--output', 'json', '--kubeconfig', kubeconfig]);
    t.equal(r.code, 1);
    assertSafe(t, r, 'status --output json');
    const progress = JSON.parse(r.stdout) as { nodes: { name: string; lag: string | null }[]; ready: boolean };
    t.equal(progress.ready, false);
    for (const name of lagging) {
      const node = progress.nodes.find((n) => n.name === name);
      t.ok(node?.lag, `${name} lags`);
      t.notOk(RAW.test(node?.lag ?? ''), `${name}: its lag holds no control character once parsed`);
      t.ok((node?.lag ?? '').length < 600, `${name}: its lag is bounded`);
    }
    t.match(progress.nodes.find((n) => n.name === 'hostile-escapes')?.lag, /^refuses the published bundle: \\u001b\[2J/);
  });

  t.test('token list: a token Secret described in control characters is escaped in the table', async (t) => {
    const id = randomBytes(3).toString('hex');
    const description = `${HOSTILE} ${LONG}`;
    expectStatus(
      await admin.request('POST', '/api/v1/namespaces/kube-system/secrets', {
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name: `bootstrap-token-${id}`, namespace: 'kube-system' },
        type: 'bootstrap.kubernetes.io/token',
        stringData: { 'token-id': id, 'token-secret': randomBytes(8).toString('hex'), 'usage-bootstrap-signing': 'true', description },
      }),
      'create a hostile token Secret',
      201,
    );
    const table = await kubeboot(t, ['token', 'list', '--kubeconfig', kubeconfig]);
    t.equal(table.code, 0);
    assertSafe(t, table, 'token list');
    const row = table.stdout.split('\n').find((l) => l.startsWith(`${id} `));
    t.match(row, /\\u001b\[2J\\u001b\[H \\u001b\]0;pwned\\u0007 nul\\u0000here \\rok {2}every.*…\(\d+ more characters\)$/);
    const json = await kubeboot(t, ['token', 'list', '--output', 'json', '--kubeconfig', kubeconfig]);
    t.notOk(RAW.test(json.stdout + json.stderr), 'token list --output json: no raw control character');
    const listed = (JSON.parse(json.stdout) as { id: string; description: string }[]).find((s) => s.id === id);
    t.equal(listed?.description, description, 'JSON keeps the exact value, escaped');
  });
}
