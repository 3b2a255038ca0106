/**
 * The TPM 2.0 numbers kubeboot uses (TPM 2.0 Part 2: Structures), by the
 * specification's names so a reader can look each one up.
 */

export const TPM_ST = { NO_SESSIONS: 0x8001, SESSIONS: 0x8002, ATTEST_QUOTE: 0x8018, ATTEST_CERTIFY: 0x8017 } as const;

export const TPM_CC = {
  ActivateCredential: 0x147,
  CreatePrimary: 0x131,
  FlushContext: 0x165,
  GetCapability: 0x17a,
  NV_Read: 0x14e,
  NV_ReadPublic: 0x169,
  PCR_Read: 0x17e,
  PolicySecret: 0x151,
  Quote: 0x158,
  ReadPublic: 0x173,
  StartAuthSession: 0x176,
} as const;

export const TPM_ALG = {
  RSA: 0x0001,
  SHA1: 0x0004,
  HMAC: 0x0005,
  AES: 0x0006,
  KEYEDHASH: 0x0008,
  SHA256: 0x000b,
  SHA384: 0x000c,
  SHA512: 0x000d,
  NULL: 0x0010,
  RSASSA: 0x0014,
  RSAES: 0x0015,
  RSAPSS: 0x0016,
  OAEP: 0x0017,
  ECDSA: 0x0018,
  ECC: 0x0023,
  CFB: 0x0043,
} as const;

export const TPM_ECC = { NIST_P256: 0x0003, NIST_P384: 0x0004 } as const;

/** TPMA_OBJECT bits. */
export const TPMA_OBJECT = {
  fixedTPM: 1 << 1,
  stClear: 1 << 2,
  fixedParent: 1 << 4,
  sensitiveDataOrigin: 1 << 5,
  userWithAuth: 1 << 6,
  adminWithPolicy: 1 << 7,
  noDA: 1 << 10,
  encryptedDuplication: 1 << 11,
  restricted: 1 << 16,
  decrypt: 1 << 17,
  sign: 1 << 18,
} as const;

export const TPM_RH = {
  OWNER: 0x40000001,
  NULL: 0x40000007,
  /** The password session: authorization by the object's authValue in the clear (empty here). */
  RS_PW: 0x40000009,
  ENDORSEMENT: 0x4000000b,
} as const;

export const TPM_SE = { HMAC: 0x00, POLICY: 0x01, TRIAL: 0x03 } as const;

export const TPM_CAP = { HANDLES: 0x00000001, TPM_PROPERTIES: 0x00000006 } as const;
export const TPM_PT = { NV_BUFFER_MAX: 0x0000012c } as const;

/** TCG EK Credential Profile 2.0: where a TPM keeps its EK and the EK's certificate. */
export const EK = {
  /** The RSA-2048 EK's certificate (low range, template L-1). */
  rsaCertIndex: 0x01c00002,
  /** The ECC NIST P-256 EK's certificate (low range, template L-2). */
  eccCertIndex: 0x01c0000a,
  /** Where the RSA EK persists when a provisioning step put it there (swtpm_setup does). */
  rsaPersistentHandle: 0x81010001,
} as const;

/** The first handle of each kind (the top byte of a handle). */
export const HANDLE_TYPE = { NV_INDEX: 0x01, HMAC_SESSION: 0x02, POLICY_SESSION: 0x03, TRANSIENT: 0x80, PERSISTENT: 0x81 } as const;

export function digestSize(alg: number): number {
  switch (alg) {
    case TPM_ALG.SHA1:
      return 20;
    case TPM_ALG.SHA256:
      return 32;
    case TPM_ALG.SHA384:
      return 48;
    case TPM_ALG.SHA512:
      return 64;
    default:
      throw new RangeError(`no digest size for algorithm 0x${alg.toString(16)}`);
  }
}

/** The node:crypto name of a TPM hash algorithm. */
export function hashName(alg: number): 'sha1' | 'sha256' | 'sha384' | 'sha512' {
  switch (alg) {
    case TPM_ALG.SHA1:
      return 'sha1';
    case TPM_ALG.SHA256:
      return 'sha256';
    case TPM_ALG.SHA384:
      return 'sha384';
    case TPM_ALG.SHA512:
      return 'sha512';
    default:
      throw new RangeError(`hash algorithm 0x${alg.toString(16)} is not one kubeboot knows`);
  }
}

export function hex32(n: number): string {
  return `0x${n.toString(16).padStart(8, '0')}`;
}
