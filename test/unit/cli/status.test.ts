// `kubeboot status` says who renews the kubelet's client certificate: kubeboot,
// or the kubelet itself when its configuration file sets rotateCertificates.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import t from 'tap';
import { runStatus } from '../../../agent/cli/status.js';
import { collectStatus } from '../../../agent/status/model.js';
import { defaultConfig } from '../../../agent/config/defaults.js';

function config(dir: string) {
  const c = defaultConfig('n1');
  c.stateDir = join(dir, 'state');
  c.kubeProxy = { ...c.kubeProxy, enabled: false };
  c.kubelet = {
    ...c.kubelet,
    kubeconfig: join(dir, 'kubelet.conf'),
    certDir: join(dir, 'pki'),
    configFile: join(dir, 'kubelet-config.yaml'),
  };
  return c;
}

async function text(c: ReturnType<typeof config>): Promise<string> {
  const out = new PassThrough();
  let written = '';
  out.on('data', (d: Buffer) => {
    written += d.toString();
  });
  await runStatus(c, 'text', out);
  return written;
}

t.test('the kubelet rotates: status says the kubelet renews', async (t) => {
  const c = config(t.testdir());
  writeFileSync(c.kubelet.configFile, 'kind: KubeletConfiguration\nrotateCertificates: true\n');
  const [kubelet] = await collectStatus(c);
  t.equal(kubelet?.renewedBy?.by, 'kubelet');
  t.match(await text(c), /renewed by: {3}kubelet: .*rotateCertificates: true: the kubelet renews its client certificate itself/);
});

t.test('no kubelet configuration file: status says kubeboot renews, and why', async (t) => {
  const c = config(t.testdir());
  const [kubelet] = await collectStatus(c);
  t.equal(kubelet?.renewedBy?.by, 'kubeboot');
  t.match(await text(c), /renewed by: {3}kubeboot: kubeboot renews the kubelet client certificate \(.* does not exist/);
});

t.test('kubelet.renewal kubeboot against a rotating kubelet: status warns in one line', async (t) => {
  const c = config(t.testdir());
  c.kubelet.renewal = 'kubeboot';
  writeFileSync(c.kubelet.configFile, 'rotateCertificates: true\n');
  t.match(await text(c), /\n {2}warning: {6}kubelet.renewal is kubeboot, but .* sets rotateCertificates: true[^\n]*\n/);
});
