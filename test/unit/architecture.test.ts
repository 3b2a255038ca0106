// docs/architecture.md names every module that touches the file system or
// reads the process environment; this keeps that list true as the code moves.
import { readdir, readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import t from 'tap';

const root = new URL('../../', import.meta.url).pathname;

async function sources(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true });
  const nested = await Promise.all(
    entries.map((e) => (e.isDirectory() ? sources(join(dir, e.name)) : Promise.resolve(e.name.endsWith('.ts') ? [join(dir, e.name)] : []))),
  );
  return nested.flat();
}

const doc = await readFile(join(root, 'docs/architecture.md'), 'utf8');
const section = doc.split('- **I/O at the edges:**')[1]?.split('- **Seams for tests:**')[0] ?? '';
const named = (text: string) => new Set([...text.matchAll(/`([a-z-]+(?:\/[a-z-]+)?\.ts)`/g)].map((m) => m[1]!));

t.test('the modules that import node:fs are the ones docs/architecture.md names', async (t) => {
  const files = await sources(join(root, 'agent'));
  const importers: string[] = [];
  for (const file of files)
    if (/from 'node:fs(?:\/promises)?'/.test(await readFile(file, 'utf8'))) importers.push(relative(join(root, 'agent'), file));
  const listed = named(section.split('The process environment')[0] ?? '');
  const allowed = (f: string) => listed.has(f) || f.startsWith('store/') || f === 'read-optional.ts';
  t.same(importers.filter((f) => !allowed(f)).sort(), [], 'every importer is named (or is store/ or read-optional.ts)');
  t.same(
    [...listed].filter((f) => !importers.includes(f) && !f.startsWith('store/') && f !== 'read-optional.ts').sort(),
    [],
    'and every named one still imports it',
  );
});

t.test('the modules that read process.env are the ones docs/architecture.md names', async (t) => {
  const files = await sources(join(root, 'agent'));
  const readers: string[] = [];
  for (const file of files) if (/process\.env\b/.test(await readFile(file, 'utf8'))) readers.push(relative(join(root, 'agent'), file));
  const listed = named((section.split('The process environment')[1] ?? '').split('Time goes through')[0] ?? '');
  t.same(readers.sort(), [...listed].sort());
});
