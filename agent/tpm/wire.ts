/**
 * The TPM 2.0 wire format (TPM 2.0 Part 2, big-endian, sized buffers with a
 * 16-bit length): a Writer that builds a command and a Reader that consumes
 * a response, failing with a TpmFormatError that names what was cut short or
 * left over. Every structure in structures.ts marshals with one and
 * unmarshals with the other, as go-tpm's tpm2/ does with its Marshal/Unmarshal.
 */

/** Bytes that are not the structure they claim to be: truncated, oversized, or with bytes left over. */
export class TpmFormatError extends Error {
  override readonly name = 'TpmFormatError';
}

export class Writer {
  private readonly parts: Buffer[] = [];
  u8(v: number): this {
    this.parts.push(Buffer.from([v & 0xff]));
    return this;
  }
  u16(v: number): this {
    const b = Buffer.alloc(2);
    b.writeUInt16BE(v);
    this.parts.push(b);
    return this;
  }
  u32(v: number): this {
    const b = Buffer.alloc(4);
    b.writeUInt32BE(v >>> 0);
    this.parts.push(b);
    return this;
  }
  bytes(b: Uint8Array): this {
    this.parts.push(Buffer.from(b));
    return this;
  }
  /** A TPM2B: a 16-bit size, then the bytes. */
  sized(b: Uint8Array): this {
    if (b.length > 0xffff) throw new TpmFormatError(`a sized buffer holds at most 65535 bytes, not ${b.length}`);
    return this.u16(b.length).bytes(b);
  }
  /** A TPM2B around a structure (TPM2B_PUBLIC, TPM2B_SENSITIVE_CREATE): the size of what `inner` writes, then it. */
  sizedOf(inner: (w: Writer) => void): this {
    const w = new Writer();
    inner(w);
    return this.sized(w.done());
  }
  done(): Buffer {
    return Buffer.concat(this.parts);
  }
}

export class Reader {
  private offset = 0;
  private readonly buf: Buffer;
  /** What is being read, for the error: "TPMS_ATTEST", "TPM2_Quote response". */
  private readonly what: string;
  constructor(buf: Buffer, what: string) {
    this.buf = buf;
    this.what = what;
  }
  private take(n: number, field: string): Buffer {
    if (this.offset + n > this.buf.length)
      throw new TpmFormatError(
        `${this.what}: ${field} is cut short (needs ${n} bytes at offset ${this.offset}, ${this.buf.length} in all)`,
      );
    const out = this.buf.subarray(this.offset, this.offset + n);
    this.offset += n;
    return out;
  }
  u8(field: string): number {
    return this.take(1, field).readUInt8(0);
  }
  u16(field: string): number {
    return this.take(2, field).readUInt16BE(0);
  }
  u32(field: string): number {
    return this.take(4, field).readUInt32BE(0);
  }
  u64(field: string): bigint {
    return this.take(8, field).readBigUInt64BE(0);
  }
  bytes(n: number, field: string): Buffer {
    return Buffer.from(this.take(n, field));
  }
  /** A TPM2B's contents; `max` bounds the size the structure allows. */
  sized(field: string, max = 0xffff): Buffer {
    const n = this.u16(`${field} size`);
    if (n > max) throw new TpmFormatError(`${this.what}: ${field} is ${n} bytes, more than the ${max} it may hold`);
    return this.bytes(n, field);
  }
  /** A TPM2B around a structure: its contents must be read exactly by `inner`. */
  sizedOf<T>(field: string, inner: (r: Reader) => T): T {
    const body = this.sized(field);
    const r = new Reader(body, `${this.what}: ${field}`);
    const value = inner(r);
    r.end();
    return value;
  }
  rest(): Buffer {
    return this.bytes(this.buf.length - this.offset, 'rest');
  }
  get remaining(): number {
    return this.buf.length - this.offset;
  }
  /** Every byte must have been read: extra bytes are refused, not ignored. */
  end(): void {
    if (this.offset !== this.buf.length)
      throw new TpmFormatError(`${this.what}: ${this.buf.length - this.offset} bytes left over after the structure`);
  }
}
