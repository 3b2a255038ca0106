import { readFile } from 'node:fs/promises';

/** How parsers read the files they are pointed at; tests pass an in-memory one. */
export type ReadFile = (file: string) => Promise<string | null>;

/** The file's text, or null when it does not exist; other errors propagate. */
export async function readOptional(file: string): Promise<string | null> {
  try {
    return await readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}
