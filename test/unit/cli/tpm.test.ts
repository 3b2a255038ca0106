// `kubeboot tpm identify`'s words: what it prints and when it exits 1 after printing.
import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { identityProblems, readEkCaBundle, renderIdentity, runTpm } from '../../../agent/cli/tpm.js';
import { InputError } from '../../../agent/errors.js';
import type { TpmIdentity } from '../../../agent/tpm/identify.js';

const id: TpmIdentity = {
  ekHash: 'ab'.repeat(32),
  ekSource: 'persistent handle 0x81010001',
  akName: `000b${'cd'.repeat(32)}`,
  device: '/dev/tpmrm0',
  ekCertificate: {
    pem: '',
    subject: 'CN=unknown',
    issuer: 'CN=vendor',
    serial: '02',
    validTo: 'Dec 31 23:59:59 9999 GMT',
    matchesEk: true,
    chain: { ok: true, why: 'issued by CN=vendor' },
  },
};

t.test('the inventory line: EK hash, AK name, certificate, CA verdict, device', async (t) => {
  t.equal(
    renderIdentity(id, 'ca.pem'),
    [
      `ek-sha256: ${'ab'.repeat(32)}`,
      `ak-name: 000b${'cd'.repeat(32)}`,
      'ek-certificate: subject CN=unknown; issuer CN=vendor; serial 02; valid to Dec 31 23:59:59 9999 GMT',
      'ek-ca: yes, issued by CN=vendor (ca.pem)',
      'tpm: /dev/tpmrm0; EK persistent handle 0x81010001',
      '',
    ].join('\n'),
  );
  t.same(identityProblems(id, 'ca.pem'), [], 'nothing to complain about: exit 0');
});

t.test('exit 1 after printing: no CA issued it, no certificate to check, a certificate for another key', async (t) => {
  const cert = id.ekCertificate!;
  t.match(
    identityProblems(
      { ...id, ekCertificate: { ...cert, chain: { ok: false, why: 'its issuer CN=vendor is not in the bundle' } } },
      'ca.pem',
    ),
    [/^the EK certificate was not issued by a CA in ca.pem: its issuer CN=vendor is not in the bundle$/],
  );
  const { ekCertificate: _, ...bare } = id;
  t.match(identityProblems(bare, 'ca.pem'), [/^no EK certificate in the TPM/]);
  t.same(identityProblems(bare, undefined), [], 'without --ek-ca a TPM without a certificate is no failure');
  t.match(identityProblems({ ...id, ekCertificate: { ...cert, matchesEk: false } }, undefined), [/not for this TPM's EK/]);
  t.match(renderIdentity({ ...id, ekCertificate: { ...cert, matchesEk: false } }, undefined), /NOT for this TPM's EK/);
});

t.test('bad input is exit 2 naming the flag, before any TPM is opened', async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'kubeboot-tpm-cli-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(path.join(dir, 'empty.pem'), 'not a certificate\n');
  await t.rejects(readEkCaBundle(path.join(dir, 'empty.pem')), { constructor: InputError, message: /--ek-ca: holds no PEM CERTIFICATE/ });
  await t.rejects(readEkCaBundle(path.join(dir, 'missing.pem')), { constructor: InputError, message: /--ek-ca: does not exist/ });
  await t.rejects(runTpm(['enroll'], {}, 'text'), { constructor: InputError, message: /unknown action "enroll" \(want identify\)/ });
  await t.rejects(runTpm([], {}, 'text'), { constructor: InputError, message: /expected identify/ });
  await t.rejects(runTpm(['identify', 'x'], {}, 'text'), { constructor: InputError, message: /usage: kubeboot tpm identify/ });
  await t.rejects(runTpm(['identify'], { 'tpm-swtpm-tcp': '192.0.2.1:2321' }, 'text'), {
    constructor: InputError,
    message: /--tpm-swtpm-tcp: 192.0.2.1 is not a loopback IP address/,
  });
});
