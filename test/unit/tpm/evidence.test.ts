// The verifier refuses bad evidence one case at a time, each for its own
// reason, starting from genuine quotes of two real (software) TPMs.
import t from 'tap';
import { rmSync } from 'node:fs';
import { TPM_ALG, TPM_RH, TPMA_OBJECT } from '../../../agent/tpm/constants.js';
import { withTpm } from '../../../agent/tpm/identify.js';
import { attestationKeyTemplate, withAttestationKey, withEndorsementKey } from '../../../agent/tpm/keys.js';
import type { Signature, TpmtPublic } from '../../../agent/tpm/structures.js';
import { EvidenceError, verifyQuote, type EvidenceReason, type QuoteEvidence, type QuoteExpectation } from '../../../agent/tpm/verify.js';
import { manufactureTpm, startSwtpm, type Swtpm } from '../../support/swtpm.js';

const PCRS = [{ hash: TPM_ALG.SHA256, pcrs: [0, 1, 2, 3, 4, 5, 6, 7] }];
const nonce = Buffer.from('5f1b0c9e2a7d4e6f8a0b1c2d3e4f5a6b', 'hex');

interface Made {
  evidence: QuoteEvidence;
  akName: Buffer;
  pcrValues: Buffer[];
  ekPublic: TpmtPublic;
  /** A quote by a signing key that is not restricted. */
  unrestricted: QuoteEvidence;
}

async function quoteFrom(sw: Swtpm): Promise<Made> {
  return withTpm({ swtpmTcp: sw.address }, async (tpm) => {
    const ekPublic = await withEndorsementKey(tpm, async (ek) => ek.public);
    const { evidence, akName } = await withAttestationKey(tpm, async (ak) => {
      const q = await tpm.quote(ak.handle, nonce, PCRS);
      return { evidence: { akPublic: ak.public, attest: q.attest, signature: q.signature }, akName: ak.name };
    });
    const { values } = await tpm.pcrRead(PCRS);
    const template = { ...attestationKeyTemplate(), attributes: attestationKeyTemplate().attributes & ~TPMA_OBJECT.restricted };
    const key = await tpm.createPrimary(TPM_RH.ENDORSEMENT, template);
    try {
      const q = await tpm.quote(key.handle, nonce, PCRS);
      return {
        evidence,
        akName,
        pcrValues: values,
        ekPublic,
        unrestricted: { akPublic: key.public, attest: q.attest, signature: q.signature },
      };
    } finally {
      await tpm.flushContext(key.handle);
    }
  });
}

const tpms: Swtpm[] = [];
let a: Made;
let b: Made;
t.before(async () => {
  const [one, two] = await Promise.all([manufactureTpm(), manufactureTpm()]);
  tpms.push(await startSwtpm(one), await startSwtpm(two));
  [a, b] = await Promise.all([quoteFrom(tpms[0] as Swtpm), quoteFrom(tpms[1] as Swtpm)]);
});
t.teardown(async () => {
  for (const sw of tpms) {
    await sw.stop();
    rmSync(sw.dir, { recursive: true, force: true });
  }
});

const expectA = (): QuoteExpectation => ({ nonce, akName: a.akName, pcrs: PCRS, pcrValues: a.pcrValues });
const flip = (buf: Buffer, at: number): Buffer => {
  const out = Buffer.from(buf);
  const i = at < 0 ? out.length + at : at;
  out.writeUInt8((out[i] as number) ^ 0x01, i);
  return out;
};
const ecdsa = (s: Signature) => s as Extract<Signature, { r: Buffer }>;

t.test('the genuine quote verifies: the control every refusal below is measured against', async (t) => {
  const attest = verifyQuote(a.evidence, expectA());
  t.same(attest.extraData, nonce);
  t.same(attest.quote?.pcrSelect, PCRS);
});

t.test('bad evidence is refused, each case for its own reason', async (t) => {
  const cases: { what: string; evidence: () => QuoteEvidence; expect?: () => QuoteExpectation; reason: EvidenceReason }[] = [
    {
      what: 'another key: the quote checked against the other TPM’s AK',
      evidence: () => ({ ...a.evidence, akPublic: b.evidence.akPublic }),
      expect: () => ({ nonce }),
      reason: 'signature',
    },
    { what: 'an AK of another TPM: its own valid quote, but not the enrolled AK', evidence: () => b.evidence, reason: 'ak-name' },
    { what: 'another nonce', evidence: () => a.evidence, expect: () => ({ ...expectA(), nonce: Buffer.alloc(16, 1) }), reason: 'nonce' },
    { what: 'an empty nonce', evidence: () => a.evidence, expect: () => ({ ...expectA(), nonce: Buffer.alloc(0) }), reason: 'nonce' },
    {
      what: 'a non-restricted signing key’s own valid quote',
      evidence: () => a.unrestricted,
      expect: () => ({ nonce }),
      reason: 'ak-attributes',
    },
    {
      what: 'an AK that can also decrypt',
      evidence: () => ({
        ...a.evidence,
        akPublic: { ...a.evidence.akPublic, attributes: a.evidence.akPublic.attributes | TPMA_OBJECT.decrypt },
      }),
      reason: 'ak-attributes',
    },
    {
      what: 'an AK that is not fixedTPM (duplicable)',
      evidence: () => ({
        ...a.evidence,
        akPublic: { ...a.evidence.akPublic, attributes: a.evidence.akPublic.attributes & ~TPMA_OBJECT.fixedTPM },
      }),
      reason: 'ak-attributes',
    },
    {
      what: 'the EK (RSA, a decryption key) as the AK',
      evidence: () => ({ ...a.evidence, akPublic: a.ekPublic }),
      expect: () => ({ nonce }),
      reason: 'ak-attributes',
    },
    {
      what: 'an AK whose scheme is ECDSA-SHA384',
      evidence: () => ({ ...a.evidence, akPublic: { ...a.evidence.akPublic, scheme: { alg: TPM_ALG.ECDSA, hash: TPM_ALG.SHA384 } } }),
      expect: () => ({ nonce }),
      reason: 'ak-attributes',
    },
    {
      what: 'a signature claiming RSASSA',
      evidence: () => ({ ...a.evidence, signature: { alg: TPM_ALG.RSASSA, hash: TPM_ALG.SHA256, sig: Buffer.alloc(256) } }),
      reason: 'algorithm',
    },
    {
      what: 'an ECDSA signature claiming SHA-384',
      evidence: () => ({ ...a.evidence, signature: { ...ecdsa(a.evidence.signature), hash: TPM_ALG.SHA384 } }),
      reason: 'algorithm',
    },
    {
      what: 'a truncated quote (last byte cut)',
      evidence: () => ({ ...a.evidence, attest: a.evidence.attest.subarray(0, -1) }),
      reason: 'format',
    },
    {
      what: 'a quote cut inside its header',
      evidence: () => ({ ...a.evidence, attest: a.evidence.attest.subarray(0, 10) }),
      reason: 'format',
    },
    {
      what: 'a quote with an extra byte',
      evidence: () => ({ ...a.evidence, attest: Buffer.concat([a.evidence.attest, Buffer.from([0])]) }),
      reason: 'format',
    },
    { what: 'an empty quote', evidence: () => ({ ...a.evidence, attest: Buffer.alloc(0) }), reason: 'format' },
    {
      what: 'an attestation of another type (certify, 0x8017)',
      evidence: () => ({
        ...a.evidence,
        attest: Buffer.concat([a.evidence.attest.subarray(0, 4), Buffer.from([0x80, 0x17]), a.evidence.attest.subarray(6)]),
      }),
      reason: 'type',
    },
    {
      what: 'a structure without TPM_GENERATED_VALUE',
      evidence: () => ({ ...a.evidence, attest: flip(a.evidence.attest, 0) }),
      reason: 'magic',
    },
    {
      what: 'a quote whose PCR digest was changed',
      evidence: () => ({ ...a.evidence, attest: flip(a.evidence.attest, -1) }),
      reason: 'signature',
    },
    {
      what: 'a signature with one bit flipped',
      evidence: () => ({ ...a.evidence, signature: { ...ecdsa(a.evidence.signature), s: flip(ecdsa(a.evidence.signature).s, -1) } }),
      reason: 'signature',
    },
    {
      what: 'a signature value over 32 bytes',
      evidence: () => ({
        ...a.evidence,
        signature: { ...ecdsa(a.evidence.signature), r: Buffer.concat([Buffer.alloc(1), ecdsa(a.evidence.signature).r]) },
      }),
      reason: 'format',
    },
    {
      what: 'the other TPM’s signature over this quote',
      evidence: () => ({ ...a.evidence, signature: b.evidence.signature }),
      reason: 'signature',
    },
    {
      what: 'other PCRs than asked for',
      evidence: () => a.evidence,
      expect: () => ({ ...expectA(), pcrs: [{ hash: TPM_ALG.SHA256, pcrs: [0, 1, 2, 3, 4, 5, 6] }] }),
      reason: 'pcr-selection',
    },
    {
      what: 'PCR values that are not the quoted ones',
      evidence: () => a.evidence,
      expect: () => ({ ...expectA(), pcrValues: [flip(a.pcrValues[0] as Buffer, 0), ...a.pcrValues.slice(1)] }),
      reason: 'pcr-digest',
    },
  ];
  for (const c of cases) {
    const err = (() => {
      try {
        verifyQuote(c.evidence(), (c.expect ?? expectA)());
        return undefined;
      } catch (e) {
        return e;
      }
    })();
    t.type(err, EvidenceError, `${c.what}: refused`);
    t.equal((err as EvidenceError | undefined)?.reason, c.reason, `${c.what}: for ${c.reason} (${(err as Error | undefined)?.message})`);
  }
});
