// Joining a node with only a server URL, a token and a CA pin — no
// hand-written bootstrap kubeconfig — against a real control plane: by
// flags, by `kubeboot join-command`'s line, and by `kubeboot user-data`'s
// files.
import { execFile } from 'node:child_process';
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';
import { parse } from 'yaml';
import { loadConfig } from '../../agent/config/load.js';
import { openPass } from '../../agent/bootstrap/pass.js';
import { parseBootstrapKubeconfig } from '../../agent/kubeconfig/parse.js';
import { silentLogger } from '../../agent/log.js';
import { caCertHash } from '../../agent/pki/pin.js';
import { readOptional } from '../../agent/read-optional.js';
import { waitFor } from '../support/admin.js';
import { controlPlaneOrSkip } from '../support/controlplane.js';
import { expectStatus } from '../support/http.js';
import { clusterInfoKubeconfig } from '../support/kubeconfig.js';
import { assertNoSecrets, forbid, handToken, kubeboot, nodeLayout, startKubeboot } from '../support/kubeboot.js';
import { systemClock } from '../../agent/time/clock.js';

const run = promisify(execFile);

const plane = await controlPlaneOrSkip(t, { name: 'join' });
if (plane) {
  const kubectl = plane.kubectlPath!;
  const pin = caCertHash(plane.caPem);
  const whoami = async (kubeconfig: string) =>
    JSON.parse((await run(kubectl, ['--kubeconfig', kubeconfig, 'auth', 'whoami', '-o', 'json'])).stdout).status.userInfo as {
      username: string;
      groups: string[];
    };
  const csrsBy = async (tokenId: string) =>
    (await plane.admin.listCsrs()).filter((c) => c.spec?.username === `system:bootstrap:${tokenId}`);
  const newToken = async () => {
    const token = await plane.admin.createBootstrapToken();
    forbid(token.secret);
    return token;
  };

  t.test('bootstrap --server --token --ca-cert-hash on an empty node dir ends with a working kubelet.conf', async (t) => {
    const node = await nodeLayout(t.testdir(), 'join-flags');
    const token = await newToken();
    const result = await kubeboot(t, [
      'bootstrap',
      '--config',
      node.config,
      '--server',
      plane.server,
      '--token',
      token.token,
      '--ca-cert-hash',
      pin,
    ]);
    t.equal(result.code, 0, `exit 0; output:\n${result.stderr}`);
    t.match(result.stderr, /join: wrote .*bootstrap-kubelet\.conf for token/);
    const user = await whoami(node.kubeletKubeconfig);
    t.equal(user.username, 'system:node:join-flags');
    t.ok(user.groups.includes('system:nodes'));
    await t.rejects(stat(node.bootstrapKubeconfig), { code: 'ENOENT' }, 'the bootstrap kubeconfig kubeboot wrote is deleted afterwards');
    t.equal((await csrsBy(token.id)).length, 1, 'one CSR, made with the token');

    t.test('a second run with the same flags keeps the credential and writes nothing', async (t) => {
      const again = await kubeboot(t, [
        'bootstrap',
        '--config',
        node.config,
        '--server',
        plane.server,
        '--token',
        token.token,
        '--ca-cert-hash',
        pin,
      ]);
      t.equal(again.code, 0, again.stderr);
      t.match(again.stderr, /keeping it/);
      t.notMatch(again.stderr, /join: /, 'no discovery, no bootstrap kubeconfig');
      await t.rejects(stat(node.bootstrapKubeconfig), { code: 'ENOENT' });
    });
  });

  t.test('check with --server --token --ca-cert-hash discovers the CA and authenticates, writing nothing', async (t) => {
    const node = await nodeLayout(t.testdir(), 'join-check');
    const token = await newToken();
    const result = await kubeboot(t, ['check', '--config', node.config, '--server', plane.server, '--ca-cert-hash', pin], {
      KUBEBOOT_TOKEN: token.token,
    });
    t.equal(result.code, 0, `exit 0; output:\n${result.stdout}${result.stderr}`);
    t.match(
      result.stdout,
      /^ok {3}bootstrap kubeconfig: join settings \(--server, --token\/--token-file\): server https:\/\/127\.0\.0\.1:\d+, bootstrap-token, CA to be discovered$/m,
    );
    t.match(result.stdout, `ok   cluster CA: discovered from kube-public/cluster-info and pinned (${pin})`);
    t.match(result.stdout, `authenticated as system:bootstrap:${token.id}`);
    await t.rejects(stat(node.bootstrapKubeconfig), { code: 'ENOENT' }, 'no bootstrap kubeconfig written');
    t.same(await csrsBy(token.id), [], 'no CSR');
    const wrong = await kubeboot(
      t,
      ['check', '--config', node.config, '--server', plane.server, '--ca-cert-hash', `sha256:${'1'.repeat(64)}`],
      { KUBEBOOT_TOKEN: token.token },
    );
    t.equal(wrong.code, 1);
    t.match(
      wrong.stdout,
      /^FAIL bootstrap kubeconfig: kube-public\/cluster-info at .*: the cluster CA matches none of the --ca-cert-hash pins; refusing it$/m,
    );
  });

  t.test('a wrong pin is refused before any CSR exists, and nothing is written', async (t) => {
    const node = await nodeLayout(t.testdir(), 'join-wrong-pin');
    const token = await newToken();
    const wrong = `sha256:${'0'.repeat(64)}`;
    const result = await kubeboot(t, ['bootstrap', '--config', node.config, '--server', plane.server, '--ca-cert-hash', wrong], {
      KUBEBOOT_TOKEN: token.token,
    });
    t.equal(result.code, 1);
    t.match(
      result.stderr,
      /kubeboot: kube-public\/cluster-info at https:\/\/127\.0\.0\.1:\d+: the cluster CA matches none of the --ca-cert-hash pins; refusing it\n$/,
    );
    t.same(await csrsBy(token.id), [], 'no CSR');
    await t.rejects(stat(node.bootstrapKubeconfig), { code: 'ENOENT' }, 'no bootstrap kubeconfig');
    await t.rejects(stat(node.kubeletKubeconfig), { code: 'ENOENT' }, 'no kubelet kubeconfig');
  });

  t.test('without a pin the join is refused as bad input', async (t) => {
    const node = await nodeLayout(t.testdir(), 'join-no-pin');
    const token = await newToken();
    const result = await kubeboot(t, ['bootstrap', '--config', node.config, '--server', plane.server], { KUBEBOOT_TOKEN: token.token });
    t.equal(result.code, 2);
    t.match(result.stderr, /^kubeboot: joining https:\/\/127\.0\.0\.1:\d+ needs --ca-cert-hash sha256:…/);
    t.same(await csrsBy(token.id), []);
  });

  t.test('the bootstrap kubeconfig written for a join is 0600, names the token file, and carries the discovered CA', async (t) => {
    const node = await nodeLayout(t.testdir(), 'join-file');
    const token = await newToken();
    const tokenFile = join(node.dir, 'token');
    await writeFile(tokenFile, `${token.token}\n`, { mode: 0o600 });
    const { config } = await loadConfig({
      argv: ['bootstrap', '--config', node.config, '--server', plane.server, '--token-file', tokenFile, '--ca-cert-hash', pin],
      env: {},
      hostname: 'x',
      readFile: readOptional,
    });
    const pass = await openPass(config, { logger: silentLogger(), clock: systemClock }, { join: true });
    t.equal(pass.found?.kind === 'kubeconfig' && pass.found.joined, true, 'joined');
    t.equal((await stat(node.bootstrapKubeconfig)).mode & 0o777, 0o600);
    const written = await parseBootstrapKubeconfig(
      node.bootstrapKubeconfig,
      await readFile(node.bootstrapKubeconfig, 'utf8'),
      readOptional,
    );
    t.equal(written.server, plane.server);
    t.equal(written.caPem?.trim(), plane.caPem.trim(), 'the CA is the cluster CA');
    t.equal(written.tokenFile, tokenFile, 'the token stays in its file (deleted with the kubeconfig)');
    t.notMatch(await readFile(node.bootstrapKubeconfig, 'utf8'), token.secret);
    t.same(pass.found?.kind === 'kubeconfig' && pass.found.bootstrap, written, 'the pass keeps in memory what reading it back gives');
    const before = await readFile(node.bootstrapKubeconfig, 'utf8');
    const again = await openPass(config, { logger: silentLogger(), clock: systemClock }, { join: true });
    t.equal(again.found?.kind, 'kubeconfig', 'a second pass finds it');
    t.notOk(again.found?.kind === 'kubeconfig' && again.found.joined, 'and does not join again');
    t.equal(await readFile(node.bootstrapKubeconfig, 'utf8'), before, 'never overwritten');
  });

  t.test('an existing bootstrap kubeconfig wins over --server/--token', async (t) => {
    const node = await nodeLayout(t.testdir(), 'join-existing');
    const token = await handToken(plane, node, 'data');
    // A well-formed token the cluster has never seen: it must not be used.
    const result = await kubeboot(t, [
      'bootstrap',
      '--config',
      node.config,
      '--server',
      plane.server,
      '--token',
      'zzzzzz.zzzzzzzzzzzzzzzz',
      '--ca-cert-hash',
      pin,
    ]);
    t.equal(result.code, 0, result.stderr);
    t.match(result.stderr, /exists; using it instead of --server\/--token/);
    t.equal((await csrsBy(token.id)).length, 1, "the CSR came from the existing kubeconfig's token");
  });

  t.test('run --token-file joins, then deletes the bootstrap kubeconfig and the token file', async (t) => {
    const node = await nodeLayout(t.testdir(), 'join-run');
    const token = await newToken();
    const tokenFile = join(node.dir, 'token');
    await writeFile(tokenFile, `${token.token}\n`, { mode: 0o600 });
    const daemon = startKubeboot([
      'run',
      '--config',
      node.config,
      '--server',
      plane.server,
      '--token-file',
      tokenFile,
      '--ca-cert-hash',
      pin,
    ]);
    t.teardown(() => void daemon.child.kill('SIGTERM'));
    await daemon.waitForOutput(/deleted the bootstrap token file/);
    t.equal((await whoami(node.kubeletKubeconfig)).username, 'system:node:join-run');
    await t.rejects(stat(tokenFile), { code: 'ENOENT' }, 'token file deleted');
    await t.rejects(stat(node.bootstrapKubeconfig), { code: 'ENOENT' }, 'bootstrap kubeconfig deleted');
    daemon.child.kill('SIGTERM');
    const done = await daemon.done;
    t.equal(done.code, 0, 'the daemon stops cleanly on SIGTERM');
    assertNoSecrets(t, done.stdout + done.stderr, 'kubeboot run');
  });

  t.test('the line join-command prints joins a node', async (t) => {
    const node = await nodeLayout(t.testdir(), 'join-command');
    const printed = await kubeboot(t, [
      'join-command',
      '--kubeconfig',
      plane.adminKubeconfig,
      '--create-token',
      '--ttl',
      '10m',
      '--description',
      'e2e join-command',
    ]);
    t.equal(printed.code, 0, printed.stderr);
    const line = printed.stdout.trim();
    const m = /^kubeboot bootstrap --server (\S+) --token ([a-z0-9]{6})\.([a-z0-9]{16}) --ca-cert-hash (sha256:[0-9a-f]{64})$/.exec(line);
    t.ok(m, `one join line, got ${JSON.stringify(line.replace(/\.[a-z0-9]{16}/, '.<secret>'))}`);
    forbid(m![3]!);
    t.equal(m![1], plane.server, 'server from the admin kubeconfig');
    t.equal(m![4], pin, "pin of the admin kubeconfig's CA");
    // The token may not authenticate yet (the apiserver's informer trails the POST); discovery waits for its signature anyway.
    await waitFor('the new token to be known to the apiserver', async () =>
      (await plane.admin.request('GET', `/api/v1/namespaces/kube-system/secrets/bootstrap-token-${m![2]}`)).status === 200
        ? true
        : undefined,
    );
    const result = await kubeboot(t, [...line.split(' ').slice(1), '--config', node.config]);
    t.equal(result.code, 0, result.stderr);
    t.equal((await whoami(node.kubeletKubeconfig)).username, 'system:node:join-command');
  });

  t.test('user-data passes cloud-init schema and its write_files join a node', async (t) => {
    const dir = t.testdir();
    const root = join(dir, 'root');
    const node = await nodeLayout(join(dir, 'node'), 'join-user-data');
    const tokenFile = join(node.dir, 'bootstrap-token');
    const sets = [
      `bootstrapKubeconfig=${node.bootstrapKubeconfig}`,
      `stateDir=${node.stateDir}`,
      `kubelet.kubeconfig=${node.kubeletKubeconfig}`,
      `kubelet.certDir=${node.kubeletCertDir}`,
      'kubeProxy.enabled=false',
      'nodeName=join-user-data',
      `tokenFile=${tokenFile}`,
      `cloudInitPaths=[${node.cloudDir}]`,
      'listen=off',
      'waitTimeout=3m',
    ].flatMap((s) => ['--set', s]);
    const out = await kubeboot(t, ['user-data', '--kubeconfig', plane.adminKubeconfig, '--create-token', '--ttl', '15m', ...sets]);
    t.equal(out.code, 0, out.stderr);
    const userData = join(dir, 'user-data.yaml');
    await writeFile(userData, out.stdout);
    const schema = await run('cloud-init', ['schema', '--config-file', userData]);
    t.match(schema.stdout + schema.stderr, /Valid cloud-config/);

    const doc = parse(out.stdout) as { write_files: { path: string; permissions: string; content: string }[] };
    const secret = /([a-z0-9]{6})\.([a-z0-9]{16})/.exec(out.stdout);
    forbid(secret![2]!);
    // Apply write_files as cloud-init would: files that name a node-dir path land there,
    // kubeboot's fixed config path lands under `root`.
    const written: Record<string, string> = {};
    for (const f of doc.write_files) {
      const target = f.path.startsWith(dir) ? f.path : join(root, f.path);
      await mkdir(dirname(target), { recursive: true });
      await writeFile(target, f.content, { mode: parseInt(f.permissions, 8) });
      written[f.path] = target;
    }
    t.same(Object.keys(written), ['/etc/kubeboot/config.yaml', tokenFile]);
    t.equal((await stat(tokenFile)).mode & 0o777, 0o600);

    const result = await kubeboot(t, ['bootstrap', '--config', written['/etc/kubeboot/config.yaml']!]);
    t.equal(result.code, 0, result.stderr);
    t.equal((await whoami(node.kubeletKubeconfig)).username, 'system:node:join-user-data');
    await t.rejects(stat(tokenFile), { code: 'ENOENT' }, 'the token file from user-data is deleted after the join');
    t.equal((await csrsBy(secret![1]!)).length, 1, 'the CSR was made with the token user-data created');
    const made = await plane.admin.request<{ data: Record<string, string> }>(
      'GET',
      `/api/v1/namespaces/kube-system/secrets/bootstrap-token-${secret![1]}`,
    );
    t.equal(
      Buffer.from(made.body.data.description ?? '', 'base64').toString(),
      'kubeboot user-data',
      'token list says what the token was made for',
    );
  });

  // Last: it changes cluster-info for the whole plane. Whoever holds a token can
  // append a CA of their own to a correctly signed cluster-info (here the
  // bootstrapsigner itself re-signs it); kubeadm would then trust both.
  t.test('a CA appended to cluster-info is not trusted: only the pinned CA reaches the kubeconfigs', async (t) => {
    const path = '/api/v1/namespaces/kube-public/configmaps/cluster-info';
    type ClusterInfo = { metadata: { resourceVersion?: string }; data: Record<string, string> };
    const original = (await plane.admin.request<ClusterInfo>('GET', path)).body;
    const token = await newToken();
    const signedFor = async (kubeconfig: string) =>
      waitFor(
        'the bootstrapsigner to sign cluster-info for the token',
        async () => {
          const now = (await plane.admin.request<ClusterInfo>('GET', path)).body;
          return now.data.kubeconfig === kubeconfig && now.data[`jws-kubeconfig-${token.id}`] !== current[`jws-kubeconfig-${token.id}`]
            ? true
            : undefined;
        },
        60_000,
      );
    let current = (await waitFor(
      'cluster-info signed for the new token',
      async () => {
        const now = (await plane.admin.request<ClusterInfo>('GET', path)).body;
        return now.data[`jws-kubeconfig-${token.id}`] ? now.data : undefined;
      },
      60_000,
    ))!;
    const rogue = (await plane.mintClientCert({ commonName: 'rogue' })).certPem; // any certificate not the cluster CA
    const tampered = clusterInfoKubeconfig(plane.server, plane.caPem + rogue);
    const put = async (kubeconfig: string) => {
      const now = (await plane.admin.request<ClusterInfo>('GET', path)).body;
      expectStatus(await plane.admin.request('PUT', path, { ...now, data: { ...now.data, kubeconfig } }), 'update cluster-info', 200);
    };
    t.teardown(async () => {
      await put(original.data.kubeconfig!);
      await signedFor(original.data.kubeconfig!);
    });
    await put(tampered);
    await signedFor(tampered);
    current = (await plane.admin.request<ClusterInfo>('GET', path)).body.data;

    const node = await nodeLayout(t.testdir(), 'join-appended-ca');
    const result = await kubeboot(t, ['bootstrap', '--config', node.config, '--server', plane.server, '--ca-cert-hash', pin], {
      KUBEBOOT_TOKEN: token.token,
    });
    t.equal(result.code, 0, result.stderr);
    t.match(
      result.stdout + result.stderr,
      /cluster-info carries 1 CA block\(s\) matching no --ca-cert-hash pin; only the 1 pinned certificate\(s\) are trusted/,
    );
    const kubelet = parse(await readFile(node.kubeletKubeconfig, 'utf8')) as {
      clusters: { cluster: { 'certificate-authority-data': string } }[];
    };
    t.equal(
      Buffer.from(kubelet.clusters[0]!.cluster['certificate-authority-data'], 'base64').toString().trim(),
      plane.caPem.trim(),
      'kubelet.conf trusts the pinned cluster CA and nothing else',
    );
    t.equal((await whoami(node.kubeletKubeconfig)).username, 'system:node:join-appended-ca');
  });
}
