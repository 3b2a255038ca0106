/**
 * The one reader for operator-supplied input files (config, kubeconfigs, CA
 * and token files). Bounded: only a regular file is read (a FIFO would block
 * forever, /dev/urandom never ends, a directory gives a bare EISDIR), and at
 * most `maxBytes` of it (a kubeconfig is kilobytes; a 20 MB one-line file
 * took the parser to 837 MiB).
 */
import { constants } from 'node:fs';
import type { Stats } from 'node:fs';
import { open } from 'node:fs/promises';
import { UnreadableInputError } from './errors.js';

/** How parsers read the files they are pointed at; tests pass an in-memory one. */
export type ReadFile = (file: string) => Promise<string | null>;

/** Cap for every input file; a CA bundle of every public root is about 220 KiB. */
export const MAX_INPUT_BYTES = 1 << 20;

function kindOfFile(stat: Stats): string {
  if (stat.isDirectory()) return 'a directory';
  if (stat.isFIFO()) return 'a named pipe (FIFO)';
  if (stat.isSocket()) return 'a socket';
  if (stat.isCharacterDevice() || stat.isBlockDevice()) return 'a device';
  return 'not a regular file';
}

/** The file's text, or null when it does not exist; anything else unusable throws UnreadableInputError. */
export async function readOptional(file: string, maxBytes: number = MAX_INPUT_BYTES): Promise<string | null> {
  let handle;
  try {
    // O_NONBLOCK: opening a FIFO with no writer returns at once instead of
    // waiting for one; fstat below then refuses it.
    handle = await open(file, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return null;
    throw new UnreadableInputError(file, `cannot open: ${code ?? (err as Error).message}`);
  }
  try {
    const stat = await handle.stat();
    if (!stat.isFile()) throw new UnreadableInputError(file, `is ${kindOfFile(stat)}; expected a regular file`);
    if (stat.size > maxBytes) throw new UnreadableInputError(file, `is ${stat.size} bytes; at most ${maxBytes} are read`);
    // Read one byte more than allowed: a file that grew since fstat is caught too.
    const buffer = Buffer.alloc(maxBytes + 1);
    let length = 0;
    for (;;) {
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, null);
      if (bytesRead === 0) break;
      length += bytesRead;
      if (length > maxBytes) throw new UnreadableInputError(file, `is more than ${maxBytes} bytes`);
    }
    try {
      return new TextDecoder('utf-8', { fatal: true }).decode(buffer.subarray(0, length));
    } catch {
      throw new UnreadableInputError(file, 'is not UTF-8 text');
    }
  } catch (err) {
    if (err instanceof UnreadableInputError) throw err;
    throw new UnreadableInputError(file, `cannot read: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  } finally {
    await handle.close();
  }
}

/** Like readOptional, for a file kubeboot only consults: why it is unusable becomes a value, not an error. */
export async function readOptionalOrProblem(file: string): Promise<string | null | { problem: string }> {
  try {
    return await readOptional(file);
  } catch (err) {
    if (err instanceof UnreadableInputError) return { problem: err.message };
    throw err;
  }
}
