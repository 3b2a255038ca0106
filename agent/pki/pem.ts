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

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
const BEGIN = '-----BEGIN ';
const END = '-----END ';
const DASHES = '-----';

/** The label after a BEGIN or END marker at `at`: a run of [A-Z0-9 ] closed by five dashes, or null. */
function labelAt(text: string, at: number): string | null {
  let i = at;
  while (i < text.length && /[A-Z0-9 ]/.test(text[i]!)) i++;
  return i > at && text.startsWith(DASHES, i) ? text.slice(at, i) : null;
}

/**
 * Every well-formed block in `text`, in order; text between blocks is ignored.
 * A block runs from `-----BEGIN X-----` and a line break to the first
 * `-----END X-----` after it. The END markers are indexed once, so the scan
 * is linear whatever the text holds: a lazy regex over the body was
 * quadratic on BEGIN lines without an END (a 144 KB cluster-info or
 * status.certificate of them took 0.5 s, 4 MiB would take minutes).
 */
export function pemBlocks(text: string): PemBlock[] {
  const ends = new Map<string, { at: number[]; next: number }>();
  for (let q = text.indexOf(END); q >= 0; q = text.indexOf(END, q + 1)) {
    const label = labelAt(text, q + END.length);
    if (label === null) continue;
    const list = ends.get(label) ?? { at: [], next: 0 };
    list.at.push(q);
    ends.set(label, list);
  }
  const blocks: PemBlock[] = [];
  for (let p = text.indexOf(BEGIN); p >= 0; p = text.indexOf(BEGIN, p + 1)) {
    const type = labelAt(text, p + BEGIN.length);
    if (type === null) continue;
    let bodyStart = p + BEGIN.length + type.length + DASHES.length;
    if (text[bodyStart] === '\r') bodyStart++;
    if (text[bodyStart] !== '\n') continue;
    bodyStart++;
    // The BEGIN markers come in order, so each label's END list is walked forward once.
    const candidates = ends.get(type);
    if (candidates === undefined) continue;
    while (candidates.next < candidates.at.length && candidates.at[candidates.next]! < bodyStart) candidates.next++;
    const q = candidates.at[candidates.next];
    if (q === undefined) continue;
    const after = q + END.length + type.length + DASHES.length;
    blocks.push(block(type, text.slice(bodyStart, q), text.slice(p, after)));
    p = after - 1;
  }
  return blocks;
}

function block(type: string, inner: string, whole: string): PemBlock {
  const lines = inner.split(/\r?\n/);
  const hasHeaders = lines.some((line) => line.includes(':'));
  const body = lines
    .filter((line) => !line.includes(':'))
    .join('')
    .replace(/\s+/g, '');
  if (!BASE64.test(body) || body.length % 4 !== 0) {
    throw new KubebootError(`PEM block "${type}" is not valid base64`);
  }
  return { type, der: new Uint8Array(Buffer.from(body, 'base64')), text: `${whole}\n`, hasHeaders };
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
