// `kubeboot token create|list|delete` against a real control plane: the
// tokens it makes are the ones kube-apiserver authenticates, nothing it
// prints besides `create`'s own line carries a secret, and a node joined
// with a token that is gone is told so quickly, with nothing left on disk.
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { SIGNATURE_WAIT_MS } from '../../agent/kube/discovery.js';
import { caCertHash } from '../../agent/pki/pin.js';
import { waitFor } from '../support/admin.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { kubeClient } from '../support/http.js';
import { forbid, kubeboot, nodeLayout } from '../support/kubeboot.js';
import { writeKubeconfig } from '../support/kubeconfig.js';

const TOKEN = /^([a-z0-9]{6})\.([a-z0-9]{16})$/;

const plane = await controlPlaneOrSkip(t, { name: 'join-token' });
if (plane) {
  const admin = ['--kubeconfig', plane.adminKubeconfig];
  const review = { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' };
  /** The status of a SelfSubjectReview made with `token`, and who it says we are. */
  const reviewAs = async (token: string) => {
    const client = kubeClient({ server: plane.server, caPem: plane.caPem, token });
    try {
      const res = await client.request<{ status?: { userInfo?: { username: string; groups: string[] } } }>(
        'POST',
        '/apis/authentication.k8s.io/v1/selfsubjectreviews',
        review,
      );
      return { status: res.status, user: res.body?.status?.userInfo };
    } finally {
      await client.close();
    }
  };
  const secretOf = async (id: string) =>
    await plane.admin.request<{ type: string; data: Record<string, string> }>(
      'GET',
      `/api/v1/namespaces/kube-system/secrets/bootstrap-token-${id}`,
    );
  const tokenSecrets = async () =>
    (
      (
        await plane.admin.request<{ items: unknown[] }>(
          'GET',
          '/api/v1/namespaces/kube-system/secrets?fieldSelector=type%3Dbootstrap.kubernetes.io%2Ftoken',
        )
      ).body.items ?? []
    ).length;
  const decode = (data: Record<string, string>, key: string) =>
    data[key] === undefined ? undefined : Buffer.from(data[key], 'base64').toString('utf8');

  const created = async (t: Test, args: string[]) => {
    const result = await kubeboot(t, ['token', 'create', ...admin, ...args]);
    t.equal(result.code, 0, `exit 0; stderr: ${result.stderr}`);
    // Unbound, on kubeboot's RBAC: only the approver's refusal is said (docs/node-identity.md).
    if (args.includes('--node') || args.includes('--pool')) t.equal(result.stderr, '', 'nothing on stderr');
    else
      t.match(
        result.stderr,
        /^kubeboot token: warning: this token is bound to no node name: kubeboot approver refuses [^\n]*\n$/,
        'one line: the approver refuses an unbound token',
      );
    const m = TOKEN.exec(result.stdout.trim());
    t.ok(m, `prints only a token, got ${JSON.stringify(result.stdout.replace(/\.[a-z0-9]{16}/g, '.<secret>'))}`);
    forbid(m![2]!);
    return { token: result.stdout.trim(), id: m![1]!, secret: m![2]! };
  };

  t.test('token create prints a token that authenticates as system:bootstrap:<id> with its groups', async (t) => {
    const before = Date.now();
    const { token, id } = await created(t, ['--groups', 'system:bootstrappers:pool-a', '--description', 'pool a', '--ttl', '30m']);
    const who = await waitFor(
      'the new token to authenticate',
      async () => {
        const r = await reviewAs(token);
        return r.status === 201 ? r.user : undefined;
      },
      30_000,
    );
    t.equal(who?.username, `system:bootstrap:${id}`);
    t.same([...(who?.groups ?? [])].sort(), ['system:authenticated', 'system:bootstrappers', 'system:bootstrappers:pool-a'].sort());

    const secret = (await secretOf(id)).body;
    t.equal(secret.type, 'bootstrap.kubernetes.io/token');
    t.equal(decode(secret.data, 'usage-bootstrap-authentication'), 'true');
    t.equal(decode(secret.data, 'usage-bootstrap-signing'), 'true');
    t.equal(decode(secret.data, 'description'), 'pool a');
    const expires = Date.parse(decode(secret.data, 'expiration') ?? '');
    t.ok(expires >= before + 30 * 60_000 - 1000 && expires <= Date.now() + 30 * 60_000, '--ttl 30m sets expiration 30 minutes ahead');

    t.test('token list shows id, expiry, usages, groups and description, never the secret', async (t) => {
      const text = await kubeboot(t, ['token', 'list', ...admin]);
      t.equal(text.code, 0);
      const row = text.stdout.split('\n').find((l) => l.startsWith(id));
      t.match(row, /authentication,signing\s+system:bootstrappers:pool-a\s+<unbound>\s+pool a$/, 'made without --node/--pool: unbound');
      t.match(row, /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z/);
      const json = await kubeboot(t, ['token', 'list', ...admin, '--output', 'json']);
      const entry = (JSON.parse(json.stdout) as { id: string }[]).find((e) => e.id === id);
      t.match(entry, { id, usages: ['authentication', 'signing'], groups: ['system:bootstrappers:pool-a'], description: 'pool a' });
      t.same(Object.keys(entry ?? {}).sort(), ['binding', 'description', 'expires', 'groups', 'id', 'usages'], 'no secret field');
      t.equal((entry as { binding?: unknown } | undefined)?.binding, null, 'no binding');
      // kubeboot() already failed the test if the secret appeared anywhere in the output.
    });

    t.test('token delete ID makes the token fail with 401', async (t) => {
      const result = await kubeboot(t, ['token', 'delete', id, ...admin]);
      t.equal(result.code, 0, result.stderr);
      t.equal((await secretOf(id)).status, 404, 'the Secret is gone');
      const status = await waitFor(
        'the deleted token to be refused',
        async () => {
          const r = await reviewAs(token);
          return r.status === 401 ? r.status : undefined;
        },
        30_000,
      );
      t.equal(status, 401);
      const again = await kubeboot(t, ['token', 'delete', id, ...admin]);
      t.equal(again.code, 2, 'deleting it twice is bad input');
      t.equal(again.stderr, `kubeboot: no bootstrap token ${id} in kube-system\n`);
    });
  });

  t.test('token create --output json carries the token and its settings', async (t) => {
    const result = await kubeboot(t, ['token', 'create', ...admin, '--output', 'json', '--usages', 'authentication', '--no-expiry']);
    t.equal(result.code, 0, result.stderr);
    const doc = JSON.parse(result.stdout) as { token: string; id: string; expires: string | null; usages: string[] };
    forbid(doc.token.split('.')[1] ?? '');
    t.match(doc.token, TOKEN);
    t.equal(doc.id, doc.token.slice(0, 6));
    t.equal(doc.expires, null, '--no-expiry: no expiration');
    t.same(doc.usages, ['authentication']);
    const secret = (await secretOf(doc.id)).body;
    t.equal(decode(secret.data, 'expiration'), undefined);
    t.equal(decode(secret.data, 'usage-bootstrap-signing'), undefined, 'not usable for signing cluster-info');
  });

  t.test('bad input is one line, exit 2, and creates nothing', async (t) => {
    const count = await tokenSecrets();
    const cases: [string[], RegExp][] = [
      [['--groups', 'system:nodes'], /^kubeboot: command line: --groups: "system:nodes" must start with system:bootstrappers:/],
      [['--ttl', '0'], /^kubeboot: command line: --ttl: 0 would make a token that never expires; pass --no-expiry/],
      [['--usages', 'everything'], /^kubeboot: command line: --usages: expected authentication or signing/],
      [['--kubeconfig', join(t.testdir(), 'missing')], /^kubeboot: command line: --kubeconfig: file not found: /],
    ];
    for (const [args, message] of cases) {
      const result = await kubeboot(t, ['token', 'create', ...admin, ...args]);
      t.equal(result.code, 2, `${args.join(' ')}: exit 2`);
      t.match(result.stderr, message);
      t.equal(result.stderr.split('\n').length, 2, `${args.join(' ')}: one line`);
      t.equal(result.stdout, '');
    }
    const noKubeconfig = await kubeboot(t, ['token', 'list'], { HOME: t.testdir(), KUBECONFIG: '' });
    t.equal(noKubeconfig.code, 2);
    t.match(noKubeconfig.stderr, /^kubeboot: no admin kubeconfig: nothing at .*\.kube\/config; pass --kubeconfig\n$/);
    t.equal(await tokenSecrets(), count, 'no Secret was created');
  });

  t.test('an unreachable cluster and a forbidden user each get one line and exit 1', async (t) => {
    const dir = t.testdir();
    const down = join(dir, 'down.conf');
    // Port 1 on loopback: nothing listens there, the connection is refused at once.
    const someone = await plane.mintClientCert({ commonName: 'someone' });
    forbid(someone.keyPem.split('\n').slice(1, -2).join(''));
    await writeKubeconfig(down, 'https://127.0.0.1:1', { pem: plane.caPem }, someone);
    const unreachable = await kubeboot(t, ['token', 'create', '--kubeconfig', down]);
    t.equal(unreachable.code, 1);
    t.match(
      unreachable.stderr,
      /^kubeboot: cannot reach the cluster at https:\/\/127\.0\.0\.1:1 \(from .*down\.conf\) to create a bootstrap token Secret in kube-system: .*ECONNREFUSED.*\n$/,
    );

    const nobody = join(dir, 'nobody.conf');
    const cred = await plane.mintClientCert({ commonName: 'nobody' });
    forbid(cred.keyPem.split('\n').slice(1, -2).join(''));
    await writeKubeconfig(nobody, plane.server, { pem: plane.caPem }, cred);
    const forbidden = await kubeboot(t, ['token', 'list', '--kubeconfig', nobody]);
    t.equal(forbidden.code, 1);
    t.match(
      forbidden.stderr,
      /^kubeboot: forbidden to list bootstrap tokens in kube-system at https:\/\/127\.0\.0\.1:\d+ \(from .*nobody\.conf\): .*"nobody" cannot list resource "secrets".*\n$/,
    );
    t.equal(forbidden.stderr.split('\n').length, 2, 'one line');
  });

  t.test('an expired token is removed by the tokencleaner', async (t) => {
    const { id } = await created(t, ['--ttl', '2s']);
    const gone = await waitFor(
      'the tokencleaner to delete the expired token',
      async () => ((await secretOf(id)).status === 404 ? true : undefined),
      90_000,
    );
    t.equal(gone, true);
  });

  const clusterInfo = async () =>
    (await plane.admin.request<{ data: Record<string, string> }>('GET', '/api/v1/namespaces/kube-public/configmaps/cluster-info')).body
      .data;
  /** `kubeboot bootstrap --server --token --ca-cert-hash` on an empty node, timed. */
  const joinByFlags = async (t: Test, name: string, token: string, extra: string[] = []) => {
    const node = await nodeLayout(t.testdir(), name);
    const started = Date.now();
    const result = await kubeboot(t, [
      'bootstrap',
      '--config',
      node.config,
      '--server',
      plane.server,
      '--token',
      token,
      '--ca-cert-hash',
      caCertHash(plane.caPem),
      ...extra,
    ]);
    return { node, result, ms: Date.now() - started, last: result.stderr.trimEnd().split('\n').at(-1) ?? '' };
  };
  /** Every file under the node's directory that holds `secret`. */
  const holding = async (dir: string, secret: string) => {
    const found: string[] = [];
    for (const e of await readdir(dir, { recursive: true, withFileTypes: true }))
      if (e.isFile() && (await readFile(join(e.parentPath, e.name), 'utf8')).includes(secret)) found.push(join(e.parentPath, e.name));
    return found;
  };
  const NEW_TOKEN =
    'make a new token (kubeboot token create, or kubeboot join-command --create-token for the whole join line) and join with it';

  t.test('a deleted token given as join flags ends with exit 5 in seconds, naming its id, and leaves no token on the node', async (t) => {
    const { token, id, secret } = await created(t, ['--ttl', '10m']);
    await waitFor('the bootstrapsigner to sign cluster-info for the token', async () =>
      (await clusterInfo())[`jws-kubeconfig-${id}`] ? true : undefined,
    );
    t.equal((await kubeboot(t, ['token', 'delete', id, ...admin])).code, 0);
    // A deleted token keeps its signature until the bootstrapsigner re-signs: wait for that, as a node joining later would see it.
    await waitFor('the bootstrapsigner to drop the deleted token’s signature', async () =>
      (await clusterInfo())[`jws-kubeconfig-${id}`] ? undefined : true,
    );

    const { node, result, ms, last } = await joinByFlags(t, 'join-deleted-token', token);
    t.equal(result.code, 5, `exit 5; stderr:\n${result.stderr}`);
    t.equal(
      last,
      `kubeboot: no signature for token ${id} in kube-public/cluster-info: deleted, expired or mistyped (${plane.server} refuses it: 401 Unauthorized); ${NEW_TOKEN}`,
    );
    t.ok(ms < SIGNATURE_WAIT_MS, `within the ${SIGNATURE_WAIT_MS / 1000}s bound: ${ms} ms`);
    t.ok(ms < 40_000, `a refused token is believed after 15 s of 401s, not the whole bound: ${ms} ms`);
    t.notMatch(result.stdout + result.stderr, secret, 'the secret is never printed');
    await t.rejects(stat(node.bootstrapKubeconfig), { code: 'ENOENT' }, 'no bootstrap kubeconfig');
    await t.rejects(stat(node.kubeletKubeconfig), { code: 'ENOENT' }, 'no kubelet kubeconfig');
    t.same(await holding(node.dir, secret), [], 'no file on the node holds the token');
    t.same(
      (await plane.admin.listCsrs()).filter((c) => c.spec?.username === `system:bootstrap:${id}`),
      [],
      'no CSR',
    );
  });

  t.test('a token that authenticates but cannot sign is waited for up to the bound, then told apart', async (t) => {
    const { token, id, secret } = await created(t, ['--ttl', '10m', '--usages', 'authentication']);
    await waitFor('the token to authenticate', async () => ((await reviewAs(token)).status === 201 ? true : undefined), 30_000);
    // waitTimeout under the 2-minute bound ends the wait sooner, with the same verdict.
    const { node, result, ms, last } = await joinByFlags(t, 'join-unsigned-token', token, ['--wait-timeout', '20s']);
    t.equal(result.code, 5, `exit 5; stderr:\n${result.stderr}`);
    t.match(
      last,
      new RegExp(
        `^kubeboot: no signature for token ${id} in kube-public/cluster-info after \\d+s, though ${plane.server.replace(/\./g, '\\.')} accepts the token: it was made without usage-bootstrap-signing, or the bootstrapsigner controller of kube-controller-manager is not running; `,
      ),
    );
    t.ok(ms >= 15_000 && ms < 40_000, `waited for the timeout, not the refusal grace: ${ms} ms`);
    t.match(result.stderr, `${plane.server} accepts the token`, 'the wait says the token authenticates');
    t.same(await holding(node.dir, secret), [], 'no file on the node holds the token');
  });
}
