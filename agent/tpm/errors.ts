/**
 * What can go wrong talking to a TPM, as classes a caller branches on
 * (errors.ts's convention): the TPM is missing or unusable here, the TPM
 * refused a command (its response code decoded: TPM 2.0 Part 2, 6.6), or
 * its answer is malformed (wire.ts's TpmFormatError).
 */
import { ExitCode, KubebootError } from '../errors.js';

/** No TPM kubeboot can use on this machine: none, only the exclusive /dev/tpm0, or no access. */
export class TpmUnavailableError extends KubebootError {
  override readonly name = 'TpmUnavailableError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, ExitCode.tpmUnavailable, options);
  }
}

/** The endorsement hierarchy has an authValue (a password): kubeboot creates its keys there with the empty one. */
export class EndorsementPasswordError extends KubebootError {
  override readonly name = 'EndorsementPasswordError';
  constructor(command: string, rc: number) {
    super(
      `the endorsement hierarchy needs a password (${command} answered ${describeRc(rc)}); kubeboot uses the empty one: clear it (tpm2_changeauth -c e -p OLD) or ask the platform's owner`,
      ExitCode.tpmUnavailable,
    );
  }
}

/** The TPM refused a command. `rc` is its response code; `code` the base code (handle/parameter/session number stripped). */
export class TpmResponseError extends KubebootError {
  override readonly name = 'TpmResponseError';
  readonly rc: number;
  readonly base: number;
  readonly command: string;
  constructor(command: string, rc: number) {
    super(`the TPM refused ${command}: ${describeRc(rc)}`);
    this.rc = rc;
    this.base = baseRc(rc);
    this.command = command;
  }
}

/** Response codes by their base value (format-1 codes without the handle/parameter/session number). */
export const TPM_RC = {
  SUCCESS: 0x000,
  FAILURE: 0x101,
  AUTH_MISSING: 0x125,
  AUTH_UNAVAILABLE: 0x12f,
  NV_AUTHORIZATION: 0x149,
  NV_UNINITIALIZED: 0x14a,
  VALUE: 0x084,
  HIERARCHY: 0x085,
  HANDLE: 0x08b,
  AUTH_FAIL: 0x08e,
  POLICY_FAIL: 0x09d,
  INTEGRITY: 0x09f,
  BAD_AUTH: 0x0a2,
  OBJECT_MEMORY: 0x902,
  SESSION_MEMORY: 0x903,
  YIELDED: 0x908,
  TESTING: 0x90a,
  LOCKOUT: 0x921,
  RETRY: 0x922,
} as const;

const NAMES: Record<number, string> = {
  129: 'TPM_RC_ASYMMETRIC',
  130: 'TPM_RC_ATTRIBUTES',
  131: 'TPM_RC_HASH',
  132: 'TPM_RC_VALUE',
  133: 'TPM_RC_HIERARCHY',
  135: 'TPM_RC_KEY_SIZE',
  137: 'TPM_RC_MODE',
  138: 'TPM_RC_TYPE',
  139: 'TPM_RC_HANDLE',
  140: 'TPM_RC_KDF',
  141: 'TPM_RC_RANGE',
  142: 'TPM_RC_AUTH_FAIL (wrong authorization value)',
  143: 'TPM_RC_NONCE',
  146: 'TPM_RC_SCHEME',
  149: 'TPM_RC_SIZE',
  150: 'TPM_RC_SYMMETRIC',
  151: 'TPM_RC_TAG',
  152: 'TPM_RC_SELECTOR',
  154: 'TPM_RC_INSUFFICIENT',
  155: 'TPM_RC_SIGNATURE',
  156: 'TPM_RC_KEY',
  157: 'TPM_RC_POLICY_FAIL',
  159: 'TPM_RC_INTEGRITY (the blob was not made for this TPM or this key)',
  162: 'TPM_RC_BAD_AUTH (wrong authorization value)',
  166: 'TPM_RC_CURVE',
  167: 'TPM_RC_ECC_POINT',
  256: 'TPM_RC_INITIALIZE (the TPM was not started: TPM2_Startup)',
  257: 'TPM_RC_FAILURE',
  288: 'TPM_RC_DISABLED',
  292: 'TPM_RC_AUTH_TYPE',
  293: 'TPM_RC_AUTH_MISSING',
  294: 'TPM_RC_POLICY',
  302: 'TPM_RC_TOO_MANY_CONTEXTS',
  303: 'TPM_RC_AUTH_UNAVAILABLE',
  322: 'TPM_RC_COMMAND_SIZE',
  323: 'TPM_RC_COMMAND_CODE (command not supported)',
  324: 'TPM_RC_AUTHSIZE',
  329: 'TPM_RC_NV_AUTHORIZATION',
  330: 'TPM_RC_NV_UNINITIALIZED',
  338: 'TPM_RC_PARENT',
  2306: 'TPM_RC_OBJECT_MEMORY (no room for another loaded object: a transient object was not flushed, or no resource manager)',
  2307: 'TPM_RC_SESSION_MEMORY (no room for another session)',
  2312: 'TPM_RC_YIELDED',
  2313: 'TPM_RC_CANCELED',
  2314: 'TPM_RC_TESTING',
  2336: 'TPM_RC_NV_RATE',
  2337: 'TPM_RC_LOCKOUT (dictionary-attack lockout)',
  2338: 'TPM_RC_RETRY',
  2339: 'TPM_RC_NV_UNAVAILABLE',
};

/** The response code without the handle, parameter or session number a format-1 code carries. */
export function baseRc(rc: number): number {
  return rc & 0x80 ? 0x80 | (rc & 0x3f) : rc & 0xfff;
}

/** What a response code means, with where it applies: "TPM_RC_BAD_AUTH (wrong authorization value) for session 1 (0x9a2)". */
export function describeRc(rc: number): string {
  const hex = `0x${rc.toString(16)}`;
  if (rc & 0xfffff000 || (!(rc & 0x80) && !(rc & 0x100))) return `response code ${hex}`;
  const base = baseRc(rc);
  const name = NAMES[base] ?? `TPM_RC 0x${base.toString(16)}`;
  let where = '';
  if (rc & 0x80) {
    const n = (rc >> 8) & 0xf;
    if (rc & 0x40) where = ` for parameter ${n}`;
    else if (rc & 0x800) where = ` for session ${n & 0x7}`;
    else if (n !== 0) where = ` for handle ${n}`;
  }
  return `${name}${where} (${hex})`;
}

/** Whether a response code says "try the same command again". */
export function isRetryable(rc: number): boolean {
  return rc === TPM_RC.RETRY || rc === TPM_RC.YIELDED || rc === TPM_RC.TESTING;
}

/** Whether a code is an authorization failure (a wrong password for a hierarchy or object). */
export function isAuthFailure(rc: number): boolean {
  const base = baseRc(rc);
  return base === TPM_RC.BAD_AUTH || base === TPM_RC.AUTH_FAIL;
}
