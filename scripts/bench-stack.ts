// `make bench`, the runtime's part: what each chosen library costs a process
// before kubeboot does anything, measured the way the product loads it (an
// esbuild ES-module bundle, Node's compile cache warm), next to a process that
// loads nothing. These are the figures that bound a bootstrap's wall time and
// an idle daemon's memory, whatever kubeboot's own code does.
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { build } from 'esbuild';

interface Library {
  label: string;
  imports: string[];
}

/** The bootstrap path's libraries, then the ones an idle daemon keeps resident. */
const LIBRARIES: Library[] = [
  { label: 'undici (HTTP, mTLS, watch)', imports: ['undici'] },
  { label: '@peculiar/x509 with reflect-metadata (CSR, certificates)', imports: ['reflect-metadata', '@peculiar/x509'] },
  { label: 'winston (logs)', imports: ['winston'] },
  { label: 'yaml (kubeconfig, config)', imports: ['yaml'] },
  { label: 'chokidar (watching the files)', imports: ['chokidar'] },
  { label: 'prom-client (metrics)', imports: ['prom-client'] },
  { label: "an idle daemon's resident set: winston, chokidar, prom-client", imports: ['winston', 'chokidar', 'prom-client'] },
  {
    label: 'the bootstrap path: undici, @peculiar/x509, winston, yaml',
    imports: ['undici', 'reflect-metadata', '@peculiar/x509', 'winston', 'yaml'],
  },
  {
    label: 'all six, as a daemon holds them after its first pass',
    imports: ['undici', 'reflect-metadata', '@peculiar/x509', 'winston', 'yaml', 'chokidar', 'prom-client'],
  },
];

const RUNS = 20;

/** A difference of medians: within a few ms it is the machine's noise, and may come out negative. */
const signed = (n: number, digits: number): string => `${n < 0 ? '−' : '+'}${Math.abs(n).toFixed(digits)}`;

const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

/** Bundles `imports` and then `code` as the product's build does; `external` files stay imports. */
async function bundle(imports: string[], file: string, code: string, external: string[] = []): Promise<void> {
  const contents = [
    ...imports.map((name, i) => `import * as m${i} from '${name}';`),
    `globalThis.loaded = [${imports.map((_, i) => `m${i}`).join(', ')}];`,
    code,
  ].join('\n');
  await build({
    stdin: { contents, resolveDir: process.cwd(), loader: 'js' },
    outfile: file,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node24',
    external,
    logLevel: 'error',
    banner: { js: "import { createRequire as __kubebootRequire } from 'node:module'; const require = __kubebootRequire(import.meta.url);" },
  });
}

// Run with `--rss`, a library's module prints its RSS after a full GC (settled, not mid-load garbage).
const PRINT_RSS = `if (process.argv.includes('--rss')) { globalThis.gc(); process.stdout.write(String(process.memoryUsage().rss)); }`;

function wallMs(file: string, env: NodeJS.ProcessEnv): number {
  const t0 = process.hrtime.bigint();
  execFileSync(process.execPath, [file], { stdio: 'ignore', env });
  return Number(process.hrtime.bigint() - t0) / 1e6;
}

/** Median over three runs of `node args`, which print their own RSS in bytes. */
function settledRssMiB(args: string[], env: NodeJS.ProcessEnv): number {
  return median([0, 1, 2].map(() => Number(execFileSync(process.execPath, args, { encoding: 'utf8', env })) / 1048576));
}

const RESIDENT = ['winston', 'chokidar', 'prom-client'];
const PASS = ['undici', 'reflect-metadata', '@peculiar/x509', 'yaml'];

/**
 * The least an idle daemon could hold, in the flags the launcher gives `run`:
 * the resident libraries only; with the pass libraries loaded too (as now);
 * and with them loaded in a worker thread that has exited (the design that
 * would drop them between passes). Settled RSS after two full GCs.
 */
async function idleBounds(dir: string, env: NodeJS.ProcessEnv, flags: string[]): Promise<[string, number][]> {
  const worker = join(dir, 'pass-worker.mjs');
  await bundle(PASS, worker, '');
  const main = join(dir, 'idle-main.mjs');
  await bundle(
    RESIDENT,
    main,
    `const mode = process.argv[2];
if (mode === 'inline') await import(${JSON.stringify(worker)});
if (mode === 'worker') { const { Worker } = await import('node:worker_threads'); await new Promise((resolve) => new Worker(${JSON.stringify(worker)}).once('exit', resolve)); }
globalThis.gc(); await new Promise((resolve) => setTimeout(resolve, 10000)); globalThis.gc();
process.stdout.write(String(process.memoryUsage().rss));`,
    [worker],
  );
  const settled = (mode: string) => settledRssMiB([...flags, '--expose-gc', main, mode], env);
  return [
    ['winston, chokidar and prom-client resident, nothing else', settled('resident')],
    ['and undici, @peculiar/x509 and yaml loaded too, as a daemon after its first pass', settled('inline')],
    ['and undici, @peculiar/x509 and yaml loaded in a worker thread that has exited', settled('worker')],
  ];
}

/** Rows: each library's start-up cost in wall time and settled RSS over an empty module. */
export async function benchStack(dir: string, daemonFlags: string[]): Promise<[string, string][]> {
  mkdirSync(dir, { recursive: true });
  const env = { ...process.env, NODE_COMPILE_CACHE: join(dir, 'compile-cache') };
  const empty = join(dir, 'empty.mjs');
  writeFileSync(empty, `${PRINT_RSS}\n`);
  const files = [empty];
  for (const [i, lib] of LIBRARIES.entries()) {
    files.push(join(dir, `lib-${i}.mjs`));
    await bundle(lib.imports, files[i + 1]!, PRINT_RSS);
  }
  for (const file of files) wallMs(file, env); // fill the compile cache
  // Interleaved, so a slower moment of a shared machine lands on every column.
  const times = files.map(() => [] as number[]);
  for (let run = 0; run < RUNS; run++)
    files.forEach((file, i) => {
      times[i]!.push(wallMs(file, env));
    });
  const rss = files.map((file) => settledRssMiB(['--expose-gc', file, '--rss'], env));
  const base = median(times[0]!);
  const rows: [string, string][] = [
    [
      `a Node process loading nothing (empty module), ${RUNS} runs`,
      `median ${base.toFixed(0)} ms wall, RSS ${rss[0]!.toFixed(1)} MiB after a full GC`,
    ],
  ];
  LIBRARIES.forEach((lib, i) => {
    const ms = median(times[i + 1]!) - base;
    const mib = rss[i + 1]! - rss[0]!;
    rows.push([
      `loading ${lib.label}`,
      `${signed(ms, 0)} ms wall, ${signed(mib, 1)} MiB RSS (${readFileSync(files[i + 1]!).length >> 10} KiB bundled)`,
    ]);
  });
  const bare = settledRssMiB(
    ['--expose-gc', '-e', `gc(); setTimeout(() => process.stdout.write(String(process.memoryUsage().rss)), 2000)`],
    env,
  );
  rows.push([`idle floor: bare node, after a full GC`, `${bare.toFixed(1)} MiB`]);
  for (const [label, mib] of await idleBounds(dir, env, daemonFlags))
    rows.push([`idle floor (node ${daemonFlags.join(' ')}): ${label}`, `${mib.toFixed(1)} MiB, ${(mib / bare).toFixed(2)}x bare`]);
  return rows;
}
