// Bundles the agent for `node dist/kubeboot.cjs`, what the packages ship:
//
//   dist/kubeboot.cjs          a few lines: the Node version check, then import() of
//   dist/lib/<hash>/main.mjs   the entry chunk, which loads each command's modules
//   dist/lib/<hash>/*.mjs      (and their libraries) only when that command runs.
//
// Split ES modules, not one 3 MB file: `kubeboot --version` parses 30 KB
// instead of everything, and `kubeboot wait` never loads undici or x509.
// The chunk directory is named by its content and the loader is replaced by
// rename, so a kubeboot started meanwhile (the test suite rebuilds while other
// tests run it) finds whole files; the last few builds' directories are kept
// because a running process loads chunks on demand.
import { createHash } from 'node:crypto';
import { build } from 'esbuild';
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';

const KEEP_BUILDS = 3;
const pkg = JSON.parse(await readFile(new URL('../package.json', import.meta.url), 'utf8'));
const nodeMajor = Number(pkg.kubeboot.node.split('.')[0]);

const result = await build({
  entryPoints: { main: 'agent/cli/main.ts' },
  outdir: 'dist/lib/staging',
  bundle: true,
  splitting: true,
  platform: 'node',
  format: 'esm',
  target: 'node24',
  outExtension: { '.js': '.mjs' },
  chunkNames: '[name]-[hash]',
  sourcemap: false,
  legalComments: 'none',
  // Bundled CommonJS dependencies call require(); an ES module has none of its own.
  banner: { js: "import { createRequire as __kubebootRequire } from 'node:module'; const require = __kubebootRequire(import.meta.url);" },
  define: { KUBEBOOT_VERSION: JSON.stringify(pkg.version) },
  logLevel: 'warning',
  write: false,
});

const digest = createHash('sha256');
for (const file of [...result.outputFiles].sort((a, b) => a.path.localeCompare(b.path))) digest.update(file.path).update(file.contents);
const id = digest.digest('hex').slice(0, 12);
const libDir = path.join('dist', 'lib', id);
if (!(await stat(libDir).catch(() => null))) {
  const temp = `${libDir}.tmp-${process.pid}`;
  await mkdir(temp, { recursive: true });
  for (const file of result.outputFiles) await writeFile(path.join(temp, path.basename(file.path)), file.contents);
  await rename(temp, libDir);
}

// Runs before any bundled module: on an older Node, undici and friends fail at
// load time with a bare TypeError, so the version is checked first.
const loader = `"use strict";
(function () {
  var major = Number(process.versions.node.split('.')[0]);
  if (!(major >= ${nodeMajor})) {
    process.stderr.write('kubeboot: needs Node.js ${nodeMajor} or newer; this is Node.js ' + process.versions.node + '\\n');
    process.exit(1);
  }
})();
import(require('node:url').pathToFileURL(require('node:path').join(__dirname, 'lib', ${JSON.stringify(id)}, 'main.mjs')).href);
`;
const outfile = 'dist/kubeboot.cjs';
await writeFile(`${outfile}.tmp-${process.pid}`, loader);
await rename(`${outfile}.tmp-${process.pid}`, outfile);
await writeFile('dist/lib/current', `${id}\n`);

// Older builds beyond the last few go; the directory's mtime orders them.
const builds = [];
for (const name of await readdir('dist/lib')) {
  if (!/^[0-9a-f]{12}$/.test(name)) continue;
  builds.push({ name, mtime: (await stat(path.join('dist/lib', name))).mtimeMs });
}
builds.sort((a, b) => b.mtime - a.mtime);
for (const old of builds.filter((b) => b.name !== id).slice(KEEP_BUILDS - 1))
  await rm(path.join('dist/lib', old.name), { recursive: true, force: true });
