/**
 * The TPM 2.0 commands kubeboot sends (TPM 2.0 Part 3), one method each,
 * over a Transport. Authorization is the password session with the empty
 * password, or a policy session the caller started. Nothing here keeps a
 * handle: whoever creates a transient object or session flushes it
 * (keys.ts), since swtpm and /dev/tpm0 have no resource manager.
 */
import { randomBytes } from 'node:crypto';
import { hex32, TPM_ALG, TPM_CAP, TPM_CC, TPM_PT, TPM_RH, TPM_SE, TPM_ST } from './constants.js';
import { EndorsementPasswordError, isAuthFailure, isRetryable, TpmResponseError } from './errors.js';
import {
  marshalPcrSelections,
  marshalPublic,
  unmarshalNvPublic,
  unmarshalPcrSelections,
  unmarshalPublic,
  unmarshalSignature,
  type Credential,
  type NvPublic,
  type PcrSelection,
  type Signature,
  type TpmtPublic,
} from './structures.js';
import type { Transport } from './transport.js';
import { Reader, TpmFormatError, Writer } from './wire.js';

/** One authorization in a command's authorization area (TPMS_AUTH_COMMAND). */
export interface Auth {
  handle: number;
  nonce?: Buffer;
  /** TPMA_SESSION; 0 = the session ends with this command. */
  attributes?: number;
  hmac?: Buffer;
}
/** The password session with the empty password: how kubeboot authorizes the endorsement hierarchy and its own keys. */
export const EMPTY_PASSWORD: Auth = { handle: TPM_RH.RS_PW };

const COMMAND_NAMES = Object.fromEntries(Object.entries(TPM_CC).map(([name, cc]) => [cc, `TPM2_${name}`])) as Record<number, string>;

/** How often a command answered TPM_RC_RETRY / YIELDED / TESTING is sent again. */
const RETRIES = 5;

export interface Response {
  handles: number[];
  params: Reader;
}

export class Tpm {
  readonly transport: Transport;
  constructor(transport: Transport) {
    this.transport = transport;
  }

  /** Marshals a command, sends it, and returns its response's handles and parameters; a non-zero response code throws. */
  async execute(cc: number, handles: number[], auths: Auth[], params: Buffer, responseHandles = 0): Promise<Response> {
    const name = COMMAND_NAMES[cc] ?? `command ${hex32(cc)}`;
    const body = new Writer();
    for (const h of handles) body.u32(h);
    if (auths.length > 0) {
      const area = new Writer();
      for (const a of auths)
        area
          .u32(a.handle)
          .sized(a.nonce ?? Buffer.alloc(0))
          .u8(a.attributes ?? 0)
          .sized(a.hmac ?? Buffer.alloc(0));
      const bytes = area.done();
      body.u32(bytes.length).bytes(bytes);
    }
    body.bytes(params);
    const rest = body.done();
    const tag = auths.length > 0 ? TPM_ST.SESSIONS : TPM_ST.NO_SESSIONS;
    const command = new Writer()
      .u16(tag)
      .u32(10 + rest.length)
      .u32(cc)
      .bytes(rest)
      .done();
    for (let attempt = 0; ; attempt++) {
      const response = await this.transport.send(command);
      const r = new Reader(response, `${name} response`);
      const rtag = r.u16('tag');
      r.u32('responseSize');
      const rc = r.u32('responseCode');
      if (rc !== 0) {
        if (isRetryable(rc) && attempt < RETRIES) continue;
        throw new TpmResponseError(name, rc);
      }
      const outHandles: number[] = [];
      for (let i = 0; i < responseHandles; i++) outHandles.push(r.u32(`handle ${i + 1}`));
      if (rtag === TPM_ST.SESSIONS) {
        const size = r.u32('parameterSize');
        const p = new Reader(r.bytes(size, 'parameters'), `${name} response parameters`);
        // The authorization area follows; with password and policy sessions it carries nothing kubeboot checks.
        return { handles: outHandles, params: p };
      }
      if (rtag !== TPM_ST.NO_SESSIONS) throw new TpmFormatError(`${name} response: tag 0x${rtag.toString(16)}`);
      return { handles: outHandles, params: new Reader(r.rest(), `${name} response parameters`) };
    }
  }

  /** TPM2_CreatePrimary: a key derived from the hierarchy's seed and the template, the same key for the same template each time. */
  async createPrimary(hierarchy: number, template: TpmtPublic): Promise<{ handle: number; public: TpmtPublic; name: Buffer }> {
    const params = new Writer()
      // TPM2B_SENSITIVE_CREATE: an empty userAuth and no data.
      .sizedOf((w) => w.sized(Buffer.alloc(0)).sized(Buffer.alloc(0)))
      .sizedOf((w) => marshalPublic(w, template))
      .sized(Buffer.alloc(0)) // outsideInfo
      .u32(0) // creationPCR: none
      .done();
    let response: Response;
    try {
      response = await this.execute(TPM_CC.CreatePrimary, [hierarchy], [EMPTY_PASSWORD], params, 1);
    } catch (err) {
      if (hierarchy === TPM_RH.ENDORSEMENT && err instanceof TpmResponseError && isAuthFailure(err.rc))
        throw new EndorsementPasswordError('TPM2_CreatePrimary', err.rc);
      throw err;
    }
    const r = response.params;
    const pub = r.sizedOf('outPublic', unmarshalPublic);
    r.sized('creationData');
    r.sized('creationHash');
    r.u16('creationTicket.tag');
    r.u32('creationTicket.hierarchy');
    r.sized('creationTicket.digest');
    const name = r.sized('name');
    r.end();
    return { handle: response.handles[0] as number, public: pub, name };
  }

  /** TPM2_ReadPublic: a loaded or persistent object's public area and name. */
  async readPublic(handle: number): Promise<{ public: TpmtPublic; name: Buffer; qualifiedName: Buffer }> {
    const { params: r } = await this.execute(TPM_CC.ReadPublic, [handle], [], Buffer.alloc(0));
    const pub = r.sizedOf('outPublic', unmarshalPublic);
    const name = r.sized('name');
    const qualifiedName = r.sized('qualifiedName');
    r.end();
    return { public: pub, name, qualifiedName };
  }

  /** TPM2_Quote with the key's own scheme: the signed TPMS_ATTEST bytes and the signature (also as TPMT_SIGNATURE bytes). */
  async quote(
    signHandle: number,
    qualifyingData: Buffer,
    pcrs: readonly PcrSelection[],
  ): Promise<{ attest: Buffer; signature: Signature; signatureBytes: Buffer }> {
    const w = new Writer().sized(qualifyingData).u16(TPM_ALG.NULL);
    marshalPcrSelections(w, pcrs);
    const { params: r } = await this.execute(TPM_CC.Quote, [signHandle], [EMPTY_PASSWORD], w.done());
    const attest = r.sized('quoted');
    const signatureBytes = r.rest();
    const sr = new Reader(signatureBytes, 'TPM2_Quote signature');
    const signature = unmarshalSignature(sr);
    sr.end();
    return { attest, signature, signatureBytes };
  }

  /** TPM2_PCR_Read: the selected PCRs' values (at most 8 per call, as the TPM returns them). */
  async pcrRead(selection: readonly PcrSelection[]): Promise<{ selection: PcrSelection[]; values: Buffer[] }> {
    const w = new Writer();
    marshalPcrSelections(w, selection);
    const { params: r } = await this.execute(TPM_CC.PCR_Read, [], [], w.done());
    r.u32('pcrUpdateCounter');
    const out = unmarshalPcrSelections(r, 'pcrSelectionOut');
    const count = r.u32('pcrValues.count');
    const values: Buffer[] = [];
    for (let i = 0; i < count; i++) values.push(r.sized(`pcrValues[${i}]`, 64));
    r.end();
    return { selection: out, values };
  }

  /** TPM2_FlushContext: unloads a transient object or ends a session. */
  async flushContext(handle: number): Promise<void> {
    await this.execute(TPM_CC.FlushContext, [], [], new Writer().u32(handle).done());
  }

  /** TPM2_GetCapability of one TPM property (TPM_PT), or undefined when the TPM does not report it. */
  async getProperty(property: number): Promise<number | undefined> {
    const params = new Writer().u32(TPM_CAP.TPM_PROPERTIES).u32(property).u32(1).done();
    const { params: r } = await this.execute(TPM_CC.GetCapability, [], [], params);
    r.u8('moreData');
    if (r.u32('capability') !== TPM_CAP.TPM_PROPERTIES) throw new TpmFormatError('TPM2_GetCapability: another capability came back');
    const count = r.u32('count');
    for (let i = 0; i < count; i++) {
      const p = r.u32('property');
      const value = r.u32('value');
      if (p === property) return value;
    }
    return undefined;
  }

  /** TPM2_NV_ReadPublic: an NV index's attributes and size. */
  async nvReadPublic(index: number): Promise<{ public: NvPublic; name: Buffer }> {
    const { params: r } = await this.execute(TPM_CC.NV_ReadPublic, [index], [], Buffer.alloc(0));
    const pub = r.sizedOf('nvPublic', unmarshalNvPublic);
    const name = r.sized('nvName');
    r.end();
    return { public: pub, name };
  }

  /** TPM2_NV_Read of `size` bytes at `offset`, authorized by `authHandle` (the index itself, or the owner) with the empty password. */
  async nvRead(authHandle: number, index: number, size: number, offset: number): Promise<Buffer> {
    const params = new Writer().u16(size).u16(offset).done();
    const { params: r } = await this.execute(TPM_CC.NV_Read, [authHandle, index], [EMPTY_PASSWORD], params);
    const data = r.sized('data');
    r.end();
    return data;
  }

  /** TPM2_StartAuthSession of an unsalted, unbound policy session hashing with SHA-256. */
  async startPolicySession(): Promise<{ handle: number; nonceTpm: Buffer }> {
    const params = new Writer()
      .sized(randomBytes(32)) // nonceCaller
      .sized(Buffer.alloc(0)) // encryptedSalt: none
      .u8(TPM_SE.POLICY)
      .u16(TPM_ALG.NULL) // symmetric: no parameter encryption
      .u16(TPM_ALG.SHA256)
      .done();
    const response = await this.execute(TPM_CC.StartAuthSession, [TPM_RH.NULL, TPM_RH.NULL], [], params, 1);
    const nonceTpm = response.params.sized('nonceTPM');
    response.params.end();
    return { handle: response.handles[0] as number, nonceTpm };
  }

  /** TPM2_PolicySecret: the session's policy now holds "whoever knows `authHandle`'s password", here the empty one. */
  async policySecret(authHandle: number, session: number): Promise<void> {
    const params = new Writer()
      .sized(Buffer.alloc(0)) // nonceTPM: no freshness needed, no expiration
      .sized(Buffer.alloc(0)) // cpHashA
      .sized(Buffer.alloc(0)) // policyRef
      .u32(0) // expiration
      .done();
    try {
      await this.execute(TPM_CC.PolicySecret, [authHandle, session], [EMPTY_PASSWORD], params);
    } catch (err) {
      if (authHandle === TPM_RH.ENDORSEMENT && err instanceof TpmResponseError && isAuthFailure(err.rc))
        throw new EndorsementPasswordError('TPM2_PolicySecret', err.rc);
      throw err;
    }
  }

  /**
   * TPM2_ActivateCredential: the EK (keyHandle, authorized by `ekSession`)
   * opens a credential made for the object `activateHandle` names, and
   * returns the secret only if that name is this object's.
   */
  async activateCredential(activateHandle: number, keyHandle: number, ekSession: number, credential: Credential): Promise<Buffer> {
    const params = new Writer().sized(credential.idObject).sized(credential.encryptedSecret).done();
    const { params: r } = await this.execute(
      TPM_CC.ActivateCredential,
      [activateHandle, keyHandle],
      [EMPTY_PASSWORD, { handle: ekSession }],
      params,
    );
    const secret = r.sized('certInfo');
    r.end();
    return secret;
  }
}

/** The NV_BUFFER_MAX a TPM reports, else 512 (every TPM 2.0 reads at least that much at once). */
export async function nvBufferMax(tpm: Tpm): Promise<number> {
  const max = await tpm.getProperty(TPM_PT.NV_BUFFER_MAX);
  return max !== undefined && max >= 64 ? Math.min(max, 2048) : 512;
}
