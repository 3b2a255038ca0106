/**
 * `kubeboot tpm identify`: this machine's TPM identity, the line an admin
 * records in the inventory: the EK public-key hash, the AK's TPM name, the
 * EK certificate, and whether a CA in `--ek-ca` issued it. Reads the TPM at
 * /dev/tpmrm0; `--tpm-swtpm-tcp 127.0.0.1:PORT` reaches a software TPM on
 * loopback instead, for tests only (docs/tpm.md).
 */
import { X509Certificate } from 'node:crypto';
import type { Given } from '../config/load.js';
import { ExitCode, InputError } from '../errors.js';
import { pemBlocks } from '../pki/pem.js';
import { readOptional } from '../read-optional.js';
import { excerpt, terminalJson, terminalLines, type Streams } from '../text.js';
import { systemClock, type Clock } from '../time/clock.js';
import { identify, withTpm, type TpmIdentity, type TpmLocation } from '../tpm/identify.js';

const CLI = 'command line';

export async function runTpm(
  positionals: string[],
  given: Given,
  output: 'text' | 'json',
  io: Streams = process,
  location: TpmLocation = {},
  clock: Clock = systemClock,
): Promise<number> {
  const [action, ...rest] = positionals;
  if (action !== 'identify')
    throw new InputError(
      CLI,
      'tpm',
      action === undefined ? 'expected identify' : `unknown action ${JSON.stringify(excerpt(action))} (want identify)`,
    );
  if (rest.length !== 0) throw new InputError(CLI, 'arguments', 'usage: kubeboot tpm identify [--ek-ca FILE] [--output json]');
  const ekCaFile = typeof given['ek-ca'] === 'string' ? given['ek-ca'] : undefined;
  const bundle = ekCaFile === undefined ? undefined : await readEkCaBundle(ekCaFile);
  const where: TpmLocation = { ...location };
  if (typeof given['tpm-swtpm-tcp'] === 'string') where.swtpmTcp = given['tpm-swtpm-tcp'];
  const id = await withTpm(where, (tpm) => identify(tpm, clock.now(), bundle));
  io.stdout.write(output === 'json' ? terminalJson(id) : renderIdentity(id, ekCaFile));
  const problems = identityProblems(id, ekCaFile);
  io.stderr.write(terminalLines(problems.map((p) => `kubeboot tpm identify: ${p}`)));
  return problems.length === 0 ? ExitCode.ok : ExitCode.other;
}

/** The PEM certificates of an EK CA file (a vendor's roots and intermediates, or swtpm's local CA). */
export async function readEkCaBundle(file: string): Promise<X509Certificate[]> {
  const text = await readOptional(file);
  if (text === null) throw new InputError(file, '--ek-ca', 'does not exist');
  const certs: X509Certificate[] = [];
  for (const block of pemBlocks(text).filter((b) => b.type === 'CERTIFICATE')) {
    try {
      certs.push(new X509Certificate(block.der));
    } catch (err) {
      throw new InputError(file, '--ek-ca', `a CERTIFICATE block is not an X.509 certificate: ${(err as Error).message}`);
    }
  }
  if (certs.length === 0) throw new InputError(file, '--ek-ca', 'holds no PEM CERTIFICATE');
  return certs;
}

/** Why the identity cannot be trusted as printed: no EK certificate for the CA check, one for another key, or not issued by the CA. */
export function identityProblems(id: TpmIdentity, ekCaFile: string | undefined): string[] {
  const cert = id.ekCertificate;
  const out: string[] = [];
  if (cert !== undefined && !cert.matchesEk) out.push("the EK certificate at NV 0x01c00002 is not for this TPM's EK");
  if (ekCaFile !== undefined) {
    if (cert === undefined) out.push(`no EK certificate in the TPM (NV 0x01c00002) to check against ${ekCaFile}`);
    else if (cert.chain !== undefined && !cert.chain.ok)
      out.push(`the EK certificate was not issued by a CA in ${ekCaFile}: ${cert.chain.why}`);
  }
  return out;
}

export function renderIdentity(id: TpmIdentity, ekCaFile: string | undefined): string {
  const cert = id.ekCertificate;
  const lines = [`ek-sha256: ${id.ekHash}`, `ak-name: ${id.akName}`];
  if (cert === undefined) lines.push('ek-certificate: none (no NV index 0x01c00002)');
  else {
    lines.push(
      `ek-certificate: subject ${cert.subject || '(empty)'}; issuer ${cert.issuer}; serial ${cert.serial}; valid to ${cert.validTo}${cert.matchesEk ? '' : "; NOT for this TPM's EK"}`,
    );
    if (cert.chain !== undefined) lines.push(`ek-ca: ${cert.chain.ok ? 'yes' : 'NO'}, ${cert.chain.why} (${ekCaFile})`);
  }
  lines.push(`tpm: ${id.device}; EK ${id.ekSource}`);
  return terminalLines(lines);
}
