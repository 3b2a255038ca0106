// kubeboot's TPM layer against a real software TPM, with tpm2-tools as the
// oracle: the same AK, the same EK and EK certificate, quotes and
// credentials that each side's tools accept from the other.
import t from 'tap';
import { execFile } from 'node:child_process';
import { createHash, X509Certificate } from 'node:crypto';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { promisify } from 'node:util';
import type { Tpm } from '../../../agent/tpm/commands.js';
import { EK, TPM_ALG, TPM_RH } from '../../../agent/tpm/constants.js';
import { EndorsementPasswordError, TpmResponseError } from '../../../agent/tpm/errors.js';
import { identify, withTpm } from '../../../agent/tpm/identify.js';
import {
  activateCredential,
  attestationKeyTemplate,
  readEkCertificate,
  rsaEkTemplate,
  withAttestationKey,
  withEndorsementKey,
} from '../../../agent/tpm/keys.js';
import {
  type Credential,
  marshalToolsCredential,
  parsePublicArea,
  parseSignature,
  publicBytes,
  unmarshalToolsCredential,
} from '../../../agent/tpm/structures.js';
import { makeCredential, primaryQualifiedName, publicKeyOf, tpmName, verifyQuote } from '../../../agent/tpm/verify.js';
import { Writer } from '../../../agent/tpm/wire.js';
import { manufactureTpm, startSwtpm, tpm2, type Swtpm } from '../../support/swtpm.js';

const run = promisify(execFile);
const PCRS = [{ hash: TPM_ALG.SHA256, pcrs: [0, 1, 2, 3, 4, 5, 6, 7] }];
const AK_TOOLS = [
  '-C',
  'e',
  '-G',
  'ecc256:ecdsa-sha256:null',
  '-a',
  'restricted|fixedtpm|fixedparent|sensitivedataorigin|userwithauth|sign',
];

let sw: Swtpm;
t.before(async () => {
  sw = await startSwtpm(await manufactureTpm());
});
t.teardown(async () => {
  await sw?.stop();
  if (sw) rmSync(sw.dir, { recursive: true, force: true });
});
/** kubeboot's connection to the swtpm, closed after `use` so tpm2-tools can connect (swtpm serves one at a time). */
const ours = <T>(use: (tpm: Tpm) => Promise<T>) => withTpm({ swtpmTcp: sw.address }, use);

const file = (name: string) => path.join(sw.dir, name);

t.test('the AK is the key tpm2_createprimary makes from the same template: same public area, same name', async (t) => {
  const mine = await ours((tpm) => withAttestationKey(tpm, async (ak) => ak));
  t.same(tpmName(mine.public), mine.name, 'the name computed from the public area is the one the TPM reports');
  await tpm2(sw, 'tpm2_createprimary', [...AK_TOOLS, '-c', 'ak.ctx']);
  await tpm2(sw, 'tpm2_readpublic', ['-c', 'ak.ctx', '-n', 'ak.name', '-o', 'ak.pub']);
  await tpm2(sw, 'tpm2_flushcontext', ['-t']);
  t.equal(mine.name.toString('hex'), readFileSync(file('ak.name')).toString('hex'), "tpm2-tools' AK has the same name");
  t.same(parsePublicArea(readFileSync(file('ak.pub'))), mine.public, 'and the same public area');
  const again = await ours((tpm) => withAttestationKey(tpm, async (ak) => ak.name));
  t.same(again, mine.name, 'created again, the AK is the same key (nothing stored)');
  t.same(attestationKeyTemplate().x.length, 0, 'the template asks for no particular point');
});

t.test('the EK: the persistent 0x81010001 is the key the standard template creates, and the certificate is for it', async (t) => {
  const { persistent, created, der, id, none } = await ours(async (tpm) => {
    const persistent = await withEndorsementKey(tpm, async (ek) => ek);
    const created = await tpm.createPrimary(TPM_RH.ENDORSEMENT, rsaEkTemplate());
    await tpm.flushContext(created.handle);
    const der = await readEkCertificate(tpm);
    const none = await readEkCertificate(tpm, EK.eccCertIndex);
    return { persistent, created, der, id: await identify(tpm, new Date()), none };
  });
  t.equal(persistent.persistent, true, 'swtpm_setup persisted the EK at 0x81010001');
  t.same(created.public, persistent.public, 'CreatePrimary of the standard RSA EK template gives the same key');
  await tpm2(sw, 'tpm2_readpublic', ['-c', '0x81010001', '-o', 'ek.pub']);
  t.same(parsePublicArea(readFileSync(file('ek.pub'))), persistent.public, 'tpm2_readpublic reads the same EK');

  await tpm2(sw, 'tpm2_nvread', ['-C', 'o', '-o', 'ek.crt', '0x01c00002']);
  t.ok(der, 'the EK certificate is read');
  t.equal(der?.toString('hex'), readFileSync(file('ek.crt')).toString('hex'), 'byte for byte what tpm2_nvread reads');
  const cert = new X509Certificate(der as Buffer);
  t.ok(cert.publicKey.equals(publicKeyOf(persistent.public)), "the certificate's key is the EK");
  const spki = cert.publicKey.export({ type: 'spki', format: 'der' });
  t.equal(id.ekHash, createHash('sha256').update(spki).digest('hex'), "ek-sha256 is SHA-256 of the certificate's SubjectPublicKeyInfo");
  t.equal(none, undefined, 'an undefined index is no certificate, not an error');
});

t.test('a quote made here is checked by tpm2_checkquote; a quote by tpm2_quote is verified here', async (t) => {
  const nonce = Buffer.from('kubeboot-nonce-0123456789abcdef');
  const mine = await ours((tpm) => withAttestationKey(tpm, async (ak) => ({ ak, quote: await tpm.quote(ak.handle, nonce, PCRS) })));
  const attest = verifyQuote(
    { akPublic: mine.ak.public, attest: mine.quote.attest, signature: mine.quote.signature },
    { nonce, akName: mine.ak.name, pcrs: PCRS },
  );
  t.same(attest.qualifiedSigner, primaryQualifiedName(mine.ak.name), 'the quote names the AK under the endorsement hierarchy');
  writeFileSync(file('q.pub'), new Writer().sized(publicBytes(mine.ak.public)).done());
  writeFileSync(file('q.msg'), mine.quote.attest);
  writeFileSync(file('q.sig'), mine.quote.signatureBytes);
  await tpm2(sw, 'tpm2_checkquote', ['-u', 'q.pub', '-m', 'q.msg', '-s', 'q.sig', '-g', 'sha256', '-q', nonce.toString('hex')]);
  t.pass('tpm2_checkquote accepts it');
  await t.rejects(
    tpm2(sw, 'tpm2_checkquote', ['-u', 'q.pub', '-m', 'q.msg', '-s', 'q.sig', '-g', 'sha256', '-q', '00ff']),
    'and refuses it for other qualifying data (the oracle can fail)',
  );

  await tpm2(sw, 'tpm2_createprimary', [...AK_TOOLS, '-c', 'ak2.ctx']);
  await tpm2(sw, 'tpm2_quote', [
    '-c',
    'ak2.ctx',
    '-l',
    'sha256:0,1,2,3,4,5,6,7',
    '-q',
    'c0ffee',
    '-m',
    't.msg',
    '-s',
    't.sig',
    '-o',
    't.pcrs',
    '-g',
    'sha256',
  ]);
  await tpm2(sw, 'tpm2_flushcontext', ['-t']);
  const pcrs = await ours((tpm) => tpm.pcrRead(PCRS));
  const verified = verifyQuote(
    { akPublic: mine.ak.public, attest: readFileSync(file('t.msg')), signature: parseSignature(readFileSync(file('t.sig'))) },
    { nonce: Buffer.from('c0ffee', 'hex'), akName: mine.ak.name, pcrs: PCRS, pcrValues: pcrs.values },
  );
  t.same(verified.extraData, Buffer.from('c0ffee', 'hex'), "tpm2_quote's quote verifies, PCR values and all");
});

t.test('a credential made here is opened by tpm2_activatecredential and by kubeboot; one by tpm2_makecredential too', async (t) => {
  const secret = Buffer.from('a secret for the AK alone');
  const { ak, ek } = await ours((tpm) => withEndorsementKey(tpm, async (ek) => withAttestationKey(tpm, async (ak) => ({ ak, ek }))));
  const activate = (c: Credential) =>
    ours((tpm) => withEndorsementKey(tpm, (e) => withAttestationKey(tpm, (a) => activateCredential(tpm, a, e, c))));
  const credential = makeCredential(ek.public, ak.name, secret);

  writeFileSync(file('c.cred'), marshalToolsCredential(credential));
  await tpm2(sw, 'tpm2_createprimary', [...AK_TOOLS, '-c', 'ak3.ctx']);
  await tpm2(sw, 'tpm2_startauthsession', ['--policy-session', '-S', 's.ctx']);
  await tpm2(sw, 'tpm2_policysecret', ['-S', 's.ctx', '-c', 'e']);
  await tpm2(sw, 'tpm2_activatecredential', ['-c', 'ak3.ctx', '-C', '0x81010001', '-i', 'c.cred', '-o', 'c.out', '-P', 'session:s.ctx']);
  await tpm2(sw, 'tpm2_flushcontext', ['-t']);
  await tpm2(sw, 'tpm2_flushcontext', ['-s']);
  t.same(readFileSync(file('c.out')), secret, 'tpm2_activatecredential opens it');

  const opened = await activate(credential);
  t.same(opened, secret, "kubeboot's ActivateCredential opens it");

  writeFileSync(file('ek.tss'), new Writer().sized(publicBytes(ek.public)).done());
  writeFileSync(file('secret.bin'), secret);
  await tpm2(sw, 'tpm2_makecredential', [
    '-T',
    'none',
    '-u',
    'ek.tss',
    '-s',
    'secret.bin',
    '-n',
    ak.name.toString('hex'),
    '-o',
    'tools.cred',
  ]);
  const tools = unmarshalToolsCredential(readFileSync(file('tools.cred')));
  const openedTools = await activate(tools);
  t.same(openedTools, secret, "kubeboot's ActivateCredential opens tpm2_makecredential's");

  const forEk = makeCredential(ek.public, ek.name, secret);
  await t.rejects(activate(forEk), TpmResponseError, 'a credential for another object (the EK) is refused by the TPM');
  const tampered = { ...credential, idObject: Buffer.from(credential.idObject) };
  tampered.idObject.writeUInt8((tampered.idObject.at(-1) as number) ^ 1, tampered.idObject.length - 1);
  await t.rejects(activate(tampered), TpmResponseError, 'a tampered credential is refused');
});

t.test(
  'every transient object and session is flushed: 20 identities and activations in a row on a TPM with no resource manager',
  async (t) => {
    await ours(async (tpm) => {
      for (let i = 0; i < 20; i++) await identify(tpm, new Date());
      const { ak, ek } = await withEndorsementKey(tpm, async (ek) => withAttestationKey(tpm, async (ak) => ({ ak, ek })));
      for (let i = 0; i < 5; i++) {
        const wrong = makeCredential(ek.public, Buffer.concat([ak.name.subarray(0, 2), Buffer.alloc(32, i + 1)]), Buffer.from('x'));
        await t.rejects(withEndorsementKey(tpm, (e) => withAttestationKey(tpm, (a) => activateCredential(tpm, a, e, wrong))));
      }
      t.ok(await identify(tpm, new Date()), 'the TPM still has room (no TPM_RC_OBJECT_MEMORY, no TPM_RC_SESSION_MEMORY)');
    });
  },
);

t.test('measure: identify, and a quote plus its verification', async (t) => {
  const start = performance.now();
  await ours((tpm) => identify(tpm, new Date()));
  const identifyMs = performance.now() - start;
  const nonce = Buffer.alloc(32, 7);
  const times: number[] = [];
  const verifyTimes: number[] = [];
  await ours((tpm) =>
    withAttestationKey(tpm, async (ak) => {
      for (let i = 0; i < 10; i++) {
        const a = performance.now();
        const q = await tpm.quote(ak.handle, nonce, PCRS);
        const b = performance.now();
        verifyQuote({ akPublic: ak.public, attest: q.attest, signature: q.signature }, { nonce, akName: ak.name, pcrs: PCRS });
        verifyTimes.push(performance.now() - b);
        times.push(performance.now() - a);
      }
    }),
  );
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
  t.comment(
    `identify ${identifyMs.toFixed(1)} ms; quote + verify median ${median(times).toFixed(2)} ms; verify alone median ${median(verifyTimes).toFixed(3)} ms`,
  );
  t.ok(identifyMs > 0);
});

t.test('kubeboot tpm identify, the bundle, on swtpm: the inventory line, the CA check, its time', async (t) => {
  const bundle = path.join(import.meta.dirname, '../../../dist/kubeboot.cjs');
  const start = performance.now();
  const { stdout } = await run(process.execPath, [bundle, 'tpm', 'identify', '--tpm-swtpm-tcp', sw.address, '--ek-ca', sw.caBundleFile]);
  const ms = performance.now() - start;
  const id = await ours((tpm) => identify(tpm, new Date()));
  t.match(stdout, `ek-sha256: ${id.ekHash}\n`);
  t.match(stdout, `ak-name: ${id.akName}\n`);
  t.match(stdout, /^ek-certificate: subject CN=unknown; issuer CN=swtpm-localca; serial /m);
  t.match(stdout, /^ek-ca: yes, issued by CN=swtpm-localca/m);
  t.comment(`kubeboot tpm identify (a new process, Node's start included): ${ms.toFixed(0)} ms`);
  const json = JSON.parse(
    (await run(process.execPath, [bundle, 'tpm', 'identify', '--tpm-swtpm-tcp', sw.address, '--output', 'json'])).stdout,
  );
  t.equal(json.ekHash, id.ekHash);
  t.match(json.ekCertificate.pem, /^-----BEGIN CERTIFICATE-----\n/, 'json carries the PEM');
});

t.test('an endorsement hierarchy with a password: one clear error, exit 6', async (t) => {
  await tpm2(sw, 'tpm2_changeauth', ['-c', 'e', 'hunter2']);
  t.teardown(() => tpm2(sw, 'tpm2_changeauth', ['-c', 'e', '-p', 'hunter2']).then(() => undefined));
  const err = await ours((tpm) => identify(tpm, new Date())).catch((e: unknown) => e);
  t.type(err, EndorsementPasswordError);
  t.match((err as Error).message, /^the endorsement hierarchy needs a password \(TPM2_CreatePrimary answered TPM_RC_/);
  t.equal((err as EndorsementPasswordError).code, 6);
  const bundle = path.join(import.meta.dirname, '../../../dist/kubeboot.cjs');
  const cli = await run(process.execPath, [bundle, 'tpm', 'identify', '--tpm-swtpm-tcp', sw.address]).catch((e: unknown) => e);
  t.equal((cli as { code: number }).code, 6, 'the command exits 6');
  t.match((cli as { stderr: string }).stderr, /^kubeboot: the endorsement hierarchy needs a password/);
});
