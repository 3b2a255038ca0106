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

/**
 * Every clock read and timer in agent/ goes through a `Clock` (time/clock.ts),
 * so the waits, retries and loops run on `FakeClock` in unit tests. Only
 * time/ touches Node's clock and timers, and the modules below, each for the
 * reason given.
 */
const REAL_TIME: Record<string, string> = {
  'credential/hooks.ts':
    'a hook is a real child process: its timeout, kill grace and stderr drain bound how long it really runs, which a fake clock cannot shorten',
  'daemon/watch.ts':
    "debounces chokidar's file events, which arrive in real time (an editor's write then rename is one change); the daemon's FakeClock tests rely on a file change being noticed without advancing their clock",
};

/** The direct uses of Node's clock and timers in one source text (comments ignored). */
function timeBypasses(text: string): string[] {
  const code = text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"`])\/\/.*$/gm, '$1');
  const forms: [string, RegExp][] = [
    ['Date.now()', /\bDate\.now\s*\(/],
    ['new Date()', /\bnew Date\s*\(\s*\)/],
    ['setTimeout', /(?:^|[^.\w$])setTimeout\s*\(/m],
    ['setInterval', /(?:^|[^.\w$])setInterval\s*\(/m],
    ['AbortSignal.timeout', /\bAbortSignal\.timeout\s*\(/],
    ['performance.now()', /\bperformance\.now\s*\(/],
    ['node:timers', /from ['"](?:node:)?timers(?:\/promises)?['"]/],
  ];
  return forms.filter(([, re]) => re.test(code)).map(([name]) => name);
}

t.test('the time check recognises each way of reading the clock or arming a timer, and only those', async (t) => {
  const cases: [string, string[]][] = [
    ['const t = Date.now();', ['Date.now()']],
    ['const d = new Date();', ['new Date()']],
    ['setTimeout(fn, 10);', ['setTimeout']],
    ['const h = setInterval(fn, 10);', ['setInterval']],
    ['fetch(u, { signal: AbortSignal.timeout(5) });', ['AbortSignal.timeout']],
    ['const m = performance.now();', ['performance.now()']],
    ["import { setTimeout as delay } from 'node:timers/promises';", ['node:timers']],
    ['clock.setTimeout(fn, 10); clock.clearTimeout(h); this.#clock.setTimeout(fn, 1);', []],
    ['const d = new Date(ms); new Date(clock.now().getTime() + 1); Date.parse(s);', []],
    ['// Date.now() in a comment\n/* setTimeout(fn) */ const x = 1;', []],
  ];
  for (const [text, found] of cases) t.same(timeBypasses(text), found, text);
});

t.test('no module outside time/ reads the clock or arms a timer except through a Clock', async (t) => {
  const files = await sources(join(root, 'agent'));
  const bypassing: Record<string, string[]> = {};
  for (const file of files) {
    const name = relative(join(root, 'agent'), file);
    if (name.startsWith('time/')) continue;
    const found = timeBypasses(await readFile(file, 'utf8'));
    if (found.length > 0) bypassing[name] = found;
  }
  t.same(
    Object.keys(bypassing)
      .filter((f) => !(f in REAL_TIME))
      .map((f) => `${f}: ${bypassing[f]!.join(', ')}`),
    [],
    'pass a Clock (time/clock.ts) instead; tests use FakeClock',
  );
  t.same(
    Object.keys(REAL_TIME).filter((f) => !(f in bypassing)),
    [],
    'every allowed module still needs real time (else drop it from the list)',
  );
});

/** The relative imports of one source text, static and dynamic, as paths under agent/. */
function importsOf(file: string, text: string): string[] {
  const specs = [...text.matchAll(/(?:\bfrom\s+|\bimport\s*\(\s*)'(\.{1,2}\/[^']+)'/g)].map((m) => m[1]!);
  return specs.map((s) => relative(join(root, 'agent'), join(file, '..', s)).replace(/\.js$/, '.ts'));
}

t.test('only cli/main.ts imports from cli/: a command parses, calls the module that owns the work, prints', async (t) => {
  const files = await sources(join(root, 'agent'));
  const reaching: string[] = [];
  for (const file of files) {
    const name = relative(join(root, 'agent'), file);
    if (name === 'cli/main.ts') continue;
    for (const target of importsOf(file, await readFile(file, 'utf8')))
      if (target.startsWith('cli/')) reaching.push(`${name} -> ${target}`);
  }
  t.same(reaching, [], 'move what two commands share down to the module that owns it (admin/, kube/, credential/, …)');
});
