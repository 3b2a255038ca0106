/**
 * PEM framing (RFC 7468). Decoding walks every block and lets the caller pick
 * by type, because kubeconfig-adjacent files mix them: the kubelet's
 * `*-current.pem` holds certificates then the key, and `openssl ecparam
 * -genkey` writes `EC PARAMETERS` before `EC PRIVATE KEY`.
 */
import { KubebootError } from '../errors.js';

export interface PemBlock {
  type: string;
  der: Uint8Array;
  /** The block as written, BEGIN line to END line, newline-terminated. */
  text: string;
  /** RFC 1421 headers such as `Proc-Type: 4,ENCRYPTED`; kubeboot never writes any. */
  hasHeaders: boolean;
}

const BLOCK = /-----BEGIN ([A-Z0-9 ]+)-----\r?\n([\s\S]*?)-----END \1-----/g;
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** Every well-formed block in `text`, in order; text between blocks is ignored. */
export function pemBlocks(text: string): PemBlock[] {
  const blocks: PemBlock[] = [];
  for (const match of text.matchAll(BLOCK)) {
    const type = match[1] ?? '';
    const lines = (match[2] ?? '').split(/\r?\n/);
    const hasHeaders = lines.some((line) => line.includes(':'));
    const body = lines.filter((line) => !line.includes(':')).join('').replace(/\s+/g, '');
    if (!BASE64.test(body) || body.length % 4 !== 0) {
      throw new KubebootError(`PEM block "${type}" is not valid base64`);
    }
    blocks.push({ type, der: new Uint8Array(Buffer.from(body, 'base64')), text: `${match[0]}\n`, hasHeaders });
  }
  return blocks;
}

/**
 * Every block of `text` when the whole text is intact, or null: a block that
 * is unterminated or not base64 (what a torn write leaves) makes it null
 * instead of throwing, for callers that treat such a file as absent.
 */
export function intactPemBlocks(text: string): PemBlock[] | null {
  try {
    const blocks = pemBlocks(text);
    return text.split('-----BEGIN ').length - 1 === blocks.length ? blocks : null;
  } catch {
    return null;
  }
}

const PRIVATE_KEY_TYPES = new Set(['PRIVATE KEY', 'EC PRIVATE KEY', 'RSA PRIVATE KEY']);

/** `PRIVATE KEY` (PKCS#8), `EC PRIVATE KEY` (SEC 1) and `RSA PRIVATE KEY` (PKCS#1): all read by client-go. */
export function isPrivateKeyBlock(block: PemBlock): boolean {
  return PRIVATE_KEY_TYPES.has(block.type);
}

export function toPem(type: string, der: Uint8Array): string {
  const base64 = Buffer.from(der).toString('base64');
  const lines = base64.match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${type}-----\n${lines.join('\n')}\n-----END ${type}-----\n`;
}
