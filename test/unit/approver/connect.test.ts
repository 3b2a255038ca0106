// Where the approver's API client comes from: its kubeconfig when present,
// otherwise the pod's service account (token read from the file, not copied).
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { connect } from '../../../agent/approver/connect.js';
import { readOptional } from '../../../agent/read-optional.js';

t.test('without the kubeconfig file, in a pod: the service account and KUBERNETES_SERVICE_*', async (t) => {
  const sa = await mkdtemp(join(tmpdir(), 'sa-'));
  await writeFile(join(sa, 'ca.crt'), '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n');
  await writeFile(join(sa, 'token'), 'eyJhbGciOiJSUzI1NiJ9.payload.sig\n');
  const { client, source } = await connect({
    kubeconfig: join(sa, 'missing.conf'),
    env: { KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '443' },
    readFile: readOptional,
    serviceAccountDir: sa,
  });
  t.equal(client.endpoint.server, 'https://[fd00::1]:443');
  t.equal(client.identityHint, 'token-file', 'the token is re-read from its file (projected tokens rotate)');
  t.match(source, /in-cluster/);
  await client.close();
});

t.test('neither a kubeconfig nor a pod: one line naming the file', async (t) => {
  await t.rejects(connect({ kubeconfig: '/nonexistent/approver.conf', env: {}, readFile: readOptional }), {
    message:
      '/nonexistent/approver.conf: (file): not found, and KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are unset (not in a pod); set --kubeconfig',
    code: 2,
  });
});

t.test('a kubeconfig with a tokenFile keeps reading that file', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'kc-'));
  await writeFile(join(dir, 'token'), 'abc.def.ghi\n');
  await writeFile(
    join(dir, 'approver.conf'),
    `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: 'https://api.test:6443', insecure-skip-tls-verify: false}}]
users: [{name: u, user: {tokenFile: token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`,
  );
  const { client, source } = await connect({ kubeconfig: join(dir, 'approver.conf'), env: {}, readFile: readOptional });
  t.equal(client.identityHint, 'token-file');
  t.equal(source, join(dir, 'approver.conf'));
  await client.close();
});
