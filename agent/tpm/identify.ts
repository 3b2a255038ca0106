/**
 * A machine's TPM identity as the inventory records it: the EK public-key
 * hash, the AK's TPM name, the EK certificate and whether it was issued by
 * a CA the admin trusts. Reads the TPM, changes nothing in it (the AK is
 * created and flushed; nothing is persisted).
 */
import { X509Certificate } from 'node:crypto';
import { EK } from './constants.js';
import { Tpm } from './commands.js';
import { readEkCertificate, withAttestationKey, withEndorsementKey } from './keys.js';
import { connectSwtpm, openDevice, parseSwtpmAddress, type Transport } from './transport.js';
import { ekPublicKeyHash, issuedByOneOf, oneLine, publicKeyOf, tpmName } from './verify.js';

export interface EkCertificateView {
  pem: string;
  subject: string;
  issuer: string;
  serial: string;
  validTo: string;
  /** Whether the certificate's public key is the EK's (a certificate for another TPM would not be). */
  matchesEk: boolean;
  /** Set when an EK CA bundle was given. */
  chain?: { ok: boolean; why: string };
}

export interface TpmIdentity {
  /** SHA-256 of the EK's SubjectPublicKeyInfo DER, hex (verify.ts ekPublicKeyHash). */
  ekHash: string;
  /** Where the EK came from: the persistent handle, or created from the standard template. */
  ekSource: string;
  /** The AK's TPM name, hex (000b ‖ SHA-256 of its public area). */
  akName: string;
  ekCertificate?: EkCertificateView;
  /** Where the TPM was reached. */
  device: string;
}

/** Where to find the TPM: /dev/tpmrm0, or (tests only) swtpm's TCP server on loopback. */
export interface TpmLocation {
  swtpmTcp?: string;
  device?: string;
  rawDevice?: string;
}

/** Where the `tpm` setting (config/options.ts) says the TPM is; null for `off`. */
export function tpmLocationOf(setting: string): TpmLocation | null {
  if (setting === 'off') return null;
  return setting.startsWith('swtpm:') ? { swtpmTcp: setting.slice('swtpm:'.length) } : {};
}

export async function openTpm(where: TpmLocation = {}): Promise<Tpm> {
  const transport: Transport =
    where.swtpmTcp !== undefined ? await connectSwtpm(parseSwtpmAddress(where.swtpmTcp)) : await openDevice(where.device, where.rawDevice);
  return new Tpm(transport);
}

/** Runs `use` with an open TPM and closes it after. */
export async function withTpm<T>(where: TpmLocation, use: (tpm: Tpm) => Promise<T>): Promise<T> {
  const tpm = await openTpm(where);
  try {
    return await use(tpm);
  } finally {
    await tpm.transport.close();
  }
}

export async function identify(tpm: Tpm, now: Date, ekCaBundle?: readonly X509Certificate[]): Promise<TpmIdentity> {
  const ek = await withEndorsementKey(tpm, async (k) => ({ public: k.public, persistent: k.persistent }));
  const ekKey = publicKeyOf(ek.public);
  const akName = await withAttestationKey(tpm, async (ak) => tpmName(ak.public));
  const der = await readEkCertificate(tpm, EK.rsaCertIndex);
  let ekCertificate: EkCertificateView | undefined;
  if (der !== undefined) {
    const cert = new X509Certificate(der);
    ekCertificate = {
      pem: cert.toString(),
      subject: oneLine(cert.subject),
      issuer: oneLine(cert.issuer),
      serial: cert.serialNumber,
      validTo: cert.validTo,
      matchesEk: cert.publicKey.equals(ekKey),
      ...(ekCaBundle !== undefined ? { chain: issuedByOneOf(cert, ekCaBundle, now) } : {}),
    };
  }
  return {
    ekHash: ekPublicKeyHash(ekKey),
    ekSource: ek.persistent ? 'persistent handle 0x81010001' : 'created from the standard RSA-2048 EK template',
    akName: akName.toString('hex'),
    ...(ekCertificate !== undefined ? { ekCertificate } : {}),
    device: tpm.transport.description,
  };
}
