import t, { type Test } from 'tap';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { runCheck } from '../../../agent/cli/check.js';
import { defaultConfig } from '../../../agent/config/defaults.js';
import type { Config } from '../../../agent/config/types.js';
import { identitiesFor } from '../../../agent/config/identities.js';
import { renderEmbeddedKubeconfig } from '../../../agent/kubeconfig/render.js';
import { silentLogger } from '../../../agent/log.js';
import { storeCredential } from '../../../agent/store/cert-store.js';
import { createCa, issueLeaf } from '../../support/pki.js';

function node(t: Test): Config {
  const root = mkdtempSync(path.join(tmpdir(), 'kubeboot-check-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const config = defaultConfig('worker-1');
  config.configFile = path.join(root, 'config.yaml');
  config.bootstrapKubeconfig = path.join(root, 'bootstrap-kubelet.conf');
  config.stateDir = path.join(root, 'state');
  config.kubelet.kubeconfig = path.join(root, 'kubelet.conf');
  config.kubelet.certDir = path.join(root, 'kubelet-pki');
  config.kubeProxy.kubeconfig = path.join(root, 'kube-proxy.conf');
  config.kubeProxy.certDir = path.join(root, 'kube-proxy-pki');
  config.kubeProxy.enabled = false;
  return config;
}

/**
 * A node whose kubelet holds a valid certificate, as a finished bootstrap
 * leaves it, and an API server that answers its SelfSubjectReview.
 */
async function nodeWithKubelet(t: Test): Promise<Config> {
  const config = node(t);
  const ca = await createCa('cluster-ca');
  const serving = await issueLeaf(ca, { commonName: 'kube-apiserver', usage: 'server', ipAddresses: ['127.0.0.1'] });
  const server = createServer({ cert: serving.certPem, key: serving.keyPem }, (req, res) => {
    req.resume().on('end', () => {
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify({
          apiVersion: 'authentication.k8s.io/v1',
          kind: 'SelfSubjectReview',
          status: { userInfo: { username: 'system:node:worker-1', groups: ['system:nodes', 'system:authenticated'] } },
        }),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => void server.close());
  const kubelet = identitiesFor(config).find((i) => i.name === 'kubelet')!;
  const cert = await issueLeaf(ca, { commonName: 'system:node:worker-1', organizations: ['system:nodes'], usage: 'client' });
  await storeCredential(kubelet, cert.certPem, cert.keyPem, new Date());
  writeFileSync(
    config.kubelet.kubeconfig,
    renderEmbeddedKubeconfig({
      server: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
      caPem: ca.certPem,
      userName: 'default-auth',
      certPem: cert.certPem,
      keyPem: cert.keyPem,
    }),
  );
  return config;
}

async function check(config: Config): Promise<{ code: number; out: string }> {
  const out = new PassThrough();
  let text = '';
  out.on('data', (c: Buffer) => (text += c.toString()));
  const code = await runCheck(config, silentLogger(), undefined, out);
  return { code, out: text };
}

t.test('check with no credentials and no bootstrap kubeconfig is bad input (exit 2)', async (t) => {
  const { code, out } = await check(node(t));
  t.equal(code, 2);
  t.match(out, /FAIL bootstrap kubeconfig: .* not present/);
});

t.test('check refuses a bootstrap kubeconfig path that is a directory with one line and exit 2', async (t) => {
  const config = node(t);
  mkdirSync(config.bootstrapKubeconfig);
  const { code, out } = await check(config);
  t.equal(code, 2);
  t.match(out, `FAIL bootstrap kubeconfig: ${config.bootstrapKubeconfig}: is a directory; expected a regular file\n`);
});

t.test('check refuses a CA that looks like PEM but is not a certificate', async (t) => {
  const config = node(t);
  const fakeCa = Buffer.from('-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n').toString('base64');
  writeFileSync(
    config.bootstrapKubeconfig,
    [
      'apiVersion: v1',
      'kind: Config',
      'clusters:',
      '- name: k',
      `  cluster: {server: "https://127.0.0.1:1", certificate-authority-data: ${fakeCa}}`,
      'users:',
      '- name: u',
      '  user: {token: abcdef.0123456789abcdef}',
      '',
    ].join('\n'),
  );
  const { code, out } = await check(config);
  t.equal(code, 2);
  t.match(out, `FAIL bootstrap kubeconfig: ${config.bootstrapKubeconfig}: certificate-authority: does not hold a valid certificate`);
  t.notMatch(out, /API server/, 'nothing is sent with a CA that cannot be trusted');
  t.match(out, /^todo kubelet credential: /m, 'a missing credential that a bootstrap kubeconfig can fix is work to do, not a failure');
});

t.test(
  'kube-proxy missing, no bootstrap kubeconfig: work to do, as the daemon asks for it with the kubelet credential (exit 0)',
  async (t) => {
    const config = await nodeWithKubelet(t);
    config.kubeProxy.enabled = true;
    const { code, out } = await check(config);
    t.equal(code, 0, out);
    t.match(out, /^ok {3}kubelet credential: valid until /m);
    t.match(out, /^todo kube-proxy credential: /m);
    t.match(out, /^ok {3}bootstrap kubeconfig: .* not present \(not needed: the kubelet credential asks for kube-proxy's\)$/m);
    t.match(out, /^ok {3}API server: https:\/\/127\.0\.0\.1:\d+ reachable; authenticated as system:node:worker-1 /m);
  },
);

t.test('the same with --server/--token given: the kubelet asks, as the daemon would, and the token is not used', async (t) => {
  const config = await nodeWithKubelet(t);
  config.kubeProxy.enabled = true;
  config.server = 'https://127.0.0.1:1';
  config.token = 'abcdef.0123456789abcdef';
  const { code, out } = await check(config);
  t.equal(code, 0, out);
  t.match(out, /not needed: the kubelet credential asks for kube-proxy's/);
  t.match(out, /authenticated as system:node:worker-1/);
});

t.test('the kubelet credential missing too, no bootstrap kubeconfig: nothing could ask for either (exit 2)', async (t) => {
  const config = node(t);
  config.kubeProxy.enabled = true;
  const { code, out } = await check(config);
  t.equal(code, 2);
  t.match(out, /^FAIL kubelet credential: /m);
  t.match(out, /^FAIL kube-proxy credential: /m);
  t.match(out, /^FAIL bootstrap kubeconfig: .* not present$/m);
});

t.test('every credential valid, no bootstrap kubeconfig: nothing to do (exit 0)', async (t) => {
  const { code, out } = await check(await nodeWithKubelet(t));
  t.equal(code, 0, out);
  t.match(out, /^ok {3}bootstrap kubeconfig: .* not present \(not needed: all credentials valid\)$/m);
});

t.test('join settings the daemon would refuse fail the check though the kubelet asks (exit 2)', async (t) => {
  const config = await nodeWithKubelet(t);
  config.kubeProxy.enabled = true;
  config.token = 'abcdef.0123456789abcdef';
  const { code, out } = await check(config);
  t.equal(code, 2, out);
  t.match(out, /^FAIL join settings: .*server .*missing: a join token needs the API server URL$/m);
});
