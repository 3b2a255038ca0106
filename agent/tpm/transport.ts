/**
 * How command bytes reach a TPM and its response comes back. In production:
 * the kernel's resource-managed device /dev/tpmrm0 (one write, one read per
 * command; the kernel flushes what a closed file left loaded). In tests
 * only: swtpm's raw TCP server on loopback, which has no resource manager
 * (commands.ts flushes every transient object it makes).
 */
import { constants as fsConstants } from 'node:fs';
import { access, open, type FileHandle } from 'node:fs/promises';
import { isIP, connect, type Socket } from 'node:net';
import { InputError } from '../errors.js';
import { TpmUnavailableError } from './errors.js';
import { TpmFormatError } from './wire.js';

export interface Transport {
  /** Where the TPM is, for messages: "/dev/tpmrm0", "swtpm at 127.0.0.1:2321 (testing only)". */
  readonly description: string;
  /** Sends one command and returns its whole response. One at a time. */
  send(command: Buffer): Promise<Buffer>;
  close(): Promise<void>;
}

/** A TPM 2.0 response is at most a few KiB; anything larger is not a TPM answering. */
const MAX_RESPONSE = 16 * 1024;

export const RESOURCE_MANAGED_DEVICE = '/dev/tpmrm0';
export const RAW_DEVICE = '/dev/tpm0';

/**
 * Opens /dev/tpmrm0 (or `device`), or says why there is no TPM to use:
 * none at all, only the exclusive /dev/tpm0 (no kernel resource manager:
 * Linux before 4.12, or a driver without one), or no permission.
 */
export async function openDevice(device = RESOURCE_MANAGED_DEVICE, rawDevice = RAW_DEVICE): Promise<Transport> {
  let handle: FileHandle;
  try {
    handle = await open(device, fsConstants.O_RDWR);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') {
      if (await exists(rawDevice))
        throw new TpmUnavailableError(
          `only ${rawDevice} exists, not ${device}: kubeboot needs the kernel's resource-managed TPM device (Linux 4.12 or later with a TPM 2.0; a TPM 1.2 has none)`,
        );
      throw new TpmUnavailableError(`no TPM: ${device} does not exist (no TPM 2.0, or it is disabled in the firmware or the VM)`);
    }
    if (code === 'EACCES' || code === 'EPERM')
      throw new TpmUnavailableError(`cannot open ${device}: permission denied (run as root or as a member of group tss)`, { cause: err });
    if (code === 'EBUSY') throw new TpmUnavailableError(`cannot open ${device}: busy`, { cause: err });
    throw new TpmUnavailableError(`cannot open ${device}: ${(err as Error).message}`, { cause: err });
  }
  return new DeviceTransport(device, handle);
}

class DeviceTransport implements Transport {
  private queue: Promise<unknown> = Promise.resolve();
  readonly description: string;
  private readonly handle: FileHandle;
  constructor(description: string, handle: FileHandle) {
    this.description = description;
    this.handle = handle;
  }
  send(command: Buffer): Promise<Buffer> {
    const result = this.queue.then(async () => {
      await this.handle.write(command, 0, command.length);
      const buf = Buffer.alloc(MAX_RESPONSE);
      // The driver hands over the whole response in one read.
      const { bytesRead } = await this.handle.read(buf, 0, buf.length, null);
      return checkedFrame(buf.subarray(0, bytesRead), this.description);
    });
    this.queue = result.catch(() => undefined);
    return result;
  }
  close(): Promise<void> {
    return this.handle.close();
  }
}

/** A TPM answer is a whole frame: its header's size field equals its length. */
function checkedFrame(frame: Buffer, where: string): Buffer {
  if (frame.length < 10) throw new TpmFormatError(`${where}: a response of ${frame.length} bytes, shorter than a TPM header`);
  const size = frame.readUInt32BE(2);
  if (size !== frame.length) throw new TpmFormatError(`${where}: the response says ${size} bytes but has ${frame.length}`);
  return frame;
}

export interface SwtpmAddress {
  host: string;
  port: number;
}

/**
 * `127.0.0.1:PORT` or `[::1]:PORT`: a loopback address only, so the testing
 * transport can never send a node's TPM traffic over a network.
 */
export function parseSwtpmAddress(text: string, field = '--tpm-swtpm-tcp'): SwtpmAddress {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(text);
  const host = m?.[1] ?? m?.[2];
  const port = Number(m?.[3]);
  if (host === undefined || !(port > 0 && port < 65536))
    throw new InputError('command line', field, `want 127.0.0.1:PORT (a loopback address and port), not ${JSON.stringify(text)}`);
  const loopback = (isIP(host) === 4 && host.startsWith('127.')) || (isIP(host) === 6 && host === '::1');
  if (!loopback)
    throw new InputError('command line', field, `${host} is not a loopback IP address (swtpm is for tests on this machine only)`);
  return { host, port };
}

/** swtpm's TCP server (`swtpm socket --server type=tcp`): raw TPM commands, responses framed by their size field. */
export async function connectSwtpm(address: SwtpmAddress): Promise<Transport> {
  const where = `swtpm at ${address.host}:${address.port} (testing only)`;
  const socket = await new Promise<Socket>((resolve, reject) => {
    const s = connect({ host: address.host, port: address.port }, () => {
      s.removeListener('error', reject);
      resolve(s);
    });
    s.once('error', (err) => reject(new TpmUnavailableError(`no TPM: cannot reach ${where}: ${err.message}`, { cause: err })));
  });
  socket.setNoDelay(true);
  return new SocketTransport(where, socket);
}

class SocketTransport implements Transport {
  private queue: Promise<unknown> = Promise.resolve();
  private pending: Buffer[] = [];
  private waiting: { resolve: (b: Buffer) => void; reject: (e: Error) => void } | undefined;
  private failed: Error | undefined;
  readonly description: string;
  private readonly socket: Socket;
  constructor(description: string, socket: Socket) {
    this.description = description;
    this.socket = socket;
    socket.on('data', (chunk: Buffer) => {
      this.pending.push(chunk);
      this.deliver();
    });
    const fail = (err: Error) => {
      this.failed ??= err;
      this.waiting?.reject(this.failed);
      this.waiting = undefined;
    };
    socket.on('error', fail);
    socket.on('close', () => fail(new TpmUnavailableError(`${description} closed the connection`)));
  }
  private deliver(): void {
    if (this.waiting === undefined) return;
    const all = Buffer.concat(this.pending);
    this.pending = [all];
    if (all.length < 6) return;
    const size = all.readUInt32BE(2);
    if (size < 10 || size > MAX_RESPONSE) {
      this.waiting.reject(new TpmFormatError(`${this.description}: a response claims ${size} bytes`));
      this.waiting = undefined;
      return;
    }
    if (all.length < size) return;
    this.pending = [all.subarray(size)];
    const waiting = this.waiting;
    this.waiting = undefined;
    waiting.resolve(Buffer.from(all.subarray(0, size)));
  }
  send(command: Buffer): Promise<Buffer> {
    const result = this.queue.then(
      () =>
        new Promise<Buffer>((resolve, reject) => {
          if (this.failed) return reject(this.failed);
          this.waiting = { resolve, reject };
          this.socket.write(command);
          this.deliver();
        }),
    );
    this.queue = result.catch(() => undefined);
    return result;
  }
  close(): Promise<void> {
    return new Promise((resolve) => {
      if (this.socket.destroyed) return resolve();
      this.socket.once('close', () => resolve());
      this.socket.end();
    });
  }
}

async function exists(p: string): Promise<boolean> {
  try {
    await access(p);
    return true;
  } catch {
    return false;
  }
}
