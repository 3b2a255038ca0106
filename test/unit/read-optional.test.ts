import t from 'tap';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { MAX_INPUT_BYTES, readOptional, UnreadableInputError } from '../../agent/read-optional.js';

const dir = mkdtempSync(path.join(tmpdir(), 'kubeboot-read-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

t.test('reads a regular file and answers null for a missing one', async (t) => {
  writeFileSync(path.join(dir, 'ok'), 'apiVersion: v1\n');
  t.equal(await readOptional(path.join(dir, 'ok')), 'apiVersion: v1\n');
  t.equal(await readOptional(path.join(dir, 'missing')), null);
});

t.test('refuses what is not a regular file, naming the file, without blocking', async (t) => {
  mkdirSync(path.join(dir, 'a-dir'));
  execFileSync('mkfifo', [path.join(dir, 'a-fifo')]);
  const cases: [string, string][] = [
    [path.join(dir, 'a-dir'), 'is a directory; expected a regular file'],
    [path.join(dir, 'a-fifo'), 'is a named pipe (FIFO); expected a regular file'],
    ['/dev/urandom', 'is a device; expected a regular file'],
    ['/dev/zero', 'is a device; expected a regular file'],
  ];
  for (const [file, problem] of cases) {
    const err = await readOptional(file).catch((e: unknown) => e);
    t.type(err, UnreadableInputError, file);
    t.equal((err as Error).message, `${file}: ${problem}`);
    t.equal((err as UnreadableInputError).code, 2, 'bad input');
  }
});

t.test('refuses a file larger than the cap and one that is not text', async (t) => {
  const big = path.join(dir, 'big');
  writeFileSync(big, Buffer.alloc(MAX_INPUT_BYTES + 1, 'a'));
  await t.rejects(readOptional(big), { message: `${big}: is ${MAX_INPUT_BYTES + 1} bytes; at most ${MAX_INPUT_BYTES} are read` });
  const small = path.join(dir, 'small');
  writeFileSync(small, 'x'.repeat(100));
  await t.rejects(readOptional(small, 10), { message: `${small}: is 100 bytes; at most 10 are read` });
  const binary = path.join(dir, 'binary');
  writeFileSync(binary, Buffer.from([0xff, 0xfe, 0x00, 0xc3]));
  await t.rejects(readOptional(binary), { message: `${binary}: is not UTF-8 text` });
});
