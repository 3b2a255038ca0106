// What an operator reads when the TPM cannot be used, and the response codes decoded.
import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { InputError } from '../../../agent/errors.js';
import { describeRc, isAuthFailure, TpmUnavailableError } from '../../../agent/tpm/errors.js';
import { openDevice, parseSwtpmAddress } from '../../../agent/tpm/transport.js';

t.test('no /dev/tpmrm0: "no TPM", or "only /dev/tpm0" when the raw device is there; exit 6', async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'kubeboot-tpmdev-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const rm = path.join(dir, 'tpmrm0');
  const raw = path.join(dir, 'tpm0');
  const none = await openDevice(rm, raw).catch((e: unknown) => e);
  t.type(none, TpmUnavailableError);
  t.match((none as Error).message, /^no TPM: .*tpmrm0 does not exist/);
  t.equal((none as TpmUnavailableError).code, 6);
  writeFileSync(raw, '');
  const only = await openDevice(rm, raw).catch((e: unknown) => e);
  t.match((only as Error).message, /^only .*tpm0 exists, not .*tpmrm0: kubeboot needs the kernel's resource-managed TPM device/);
  if (process.getuid?.() !== 0) {
    writeFileSync(rm, '');
    chmodSync(rm, 0);
    t.match(
      ((await openDevice(rm, raw).catch((e: unknown) => e)) as Error).message,
      /permission denied \(run as root or as a member of group tss\)/,
    );
  }
});

t.test('--tpm-swtpm-tcp takes a loopback IP and port only', async (t) => {
  t.same(parseSwtpmAddress('127.0.0.1:2321'), { host: '127.0.0.1', port: 2321 });
  t.same(parseSwtpmAddress('[::1]:2321'), { host: '::1', port: 2321 });
  for (const bad of ['10.0.0.1:2321', 'localhost:2321', 'tpm.example:2321', '127.0.0.1', '127.0.0.1:0', '127.0.0.1:70000', '[::2]:1'])
    t.throws(() => parseSwtpmAddress(bad), InputError, `refuses ${bad}`);
});

t.test('response codes name the error and where it applies', async (t) => {
  t.match(describeRc(0x902), /^TPM_RC_OBJECT_MEMORY .* \(0x902\)$/);
  t.equal(describeRc(0x9a2), 'TPM_RC_BAD_AUTH (wrong authorization value) for session 1 (0x9a2)');
  t.equal(describeRc(0x98e), 'TPM_RC_AUTH_FAIL (wrong authorization value) for session 1 (0x98e)');
  t.equal(describeRc(0x18b), 'TPM_RC_HANDLE for handle 1 (0x18b)');
  t.equal(describeRc(0x2c4), 'TPM_RC_VALUE for parameter 2 (0x2c4)');
  t.match(describeRc(0x101), /^TPM_RC_FAILURE \(0x101\)$/);
  t.equal(describeRc(0x8000a), 'response code 0x8000a', 'a code from a software layer is shown as it is');
  t.ok(isAuthFailure(0x9a2) && isAuthFailure(0x98e) && !isAuthFailure(0x902));
});
