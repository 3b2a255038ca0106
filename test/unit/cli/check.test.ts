import t, { type Test } from 'tap';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { runCheck } from '../../../agent/cli/check.js';
import { defaultConfig } from '../../../agent/config/defaults.js';
import type { Config } from '../../../agent/config/types.js';
import { silentLogger } from '../../../agent/log.js';

function node(t: Test): Config {
  const root = mkdtempSync(path.join(tmpdir(), 'kubeboot-check-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const config = defaultConfig('worker-1');
  config.configFile = path.join(root, 'config.yaml');
  config.bootstrapKubeconfig = path.join(root, 'bootstrap-kubelet.conf');
  config.stateDir = path.join(root, 'state');
  config.kubelet.kubeconfig = path.join(root, 'kubelet.conf');
  config.kubelet.certDir = path.join(root, 'kubelet-pki');
  config.kubeProxy.enabled = false;
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
