// The node's `tpm` setting: off by default, the device, or (tests only) a
// software TPM on loopback; and with a TPM, the kubelet must not renew its
// own client certificate, which check and status say before it runs out.
import t from 'tap';
import { tpmSettingProblem } from '../../../agent/config/options.js';
import { kubeletRenewer, tpmRenewalProblem } from '../../../agent/renewal/owner.js';
import { tpmLocationOf } from '../../../agent/tpm/identify.js';

t.test('tpm: off, device, or swtpm on a loopback address only', async (t) => {
  for (const ok of ['off', 'device', 'swtpm:127.0.0.1:2321', 'swtpm:[::1]:2321']) t.equal(tpmSettingProblem(ok), null, ok);
  t.match(tpmSettingProblem('on'), /want off, device or swtpm:127\.0\.0\.1:PORT/);
  t.match(tpmSettingProblem('swtpm:10.0.0.5:2321'), /loopback address and port/, 'never a TPM across the network');
  t.match(tpmSettingProblem('swtpm:127.0.0.1:99999'), /loopback address and port/);
  t.equal(tpmLocationOf('off'), null);
  t.same(tpmLocationOf('device'), {}, '/dev/tpmrm0');
  t.same(tpmLocationOf('swtpm:127.0.0.1:2321'), { swtpmTcp: '127.0.0.1:2321' });
});

t.test('with a TPM, the kubelet renewing its own client certificate is a problem; kubeboot renewing it is not', async (t) => {
  const rotating = kubeletRenewer('auto', '/var/lib/kubelet/config.yaml', 'kind: KubeletConfiguration\nrotateCertificates: true\n');
  const kubeboot = kubeletRenewer('auto', '/var/lib/kubelet/config.yaml', null);
  t.match(
    tpmRenewalProblem('device', rotating),
    /--tpm is device, but the kubelet renews its own client certificate .*\(rule tpm-attested\)/,
  );
  t.equal(tpmRenewalProblem('device', kubeboot), null);
  t.equal(tpmRenewalProblem('off', rotating), null, 'no TPM: nothing to say');
});
