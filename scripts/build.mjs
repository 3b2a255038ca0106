// Bundles the agent into one CommonJS file, dist/kubeboot.cjs: the form both
// `node dist/kubeboot.cjs` and a Node single executable application can run.
// The bundle replaces the old one by rename, so a kubeboot started meanwhile
// (the test suite rebuilds while other tests run it) reads a whole file.
import { build } from 'esbuild';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';

const outfile = 'dist/kubeboot.cjs';
const pkg = JSON.parse(await readFile(new URL('../package.json', import.meta.url), 'utf8'));
// Runs before any bundled module: on an older Node, undici and friends fail at
// load time with a bare TypeError, so the version is checked first.
const nodeMajor = Number(pkg.kubeboot.node.split('.')[0]);
const nodeGuard = `"use strict";
(function () {
  var major = Number(process.versions.node.split('.')[0]);
  if (!(major >= ${nodeMajor})) {
    process.stderr.write('kubeboot: needs Node.js ${nodeMajor} or newer; this is Node.js ' + process.versions.node + '\\n');
    process.exit(1);
  }
})();`;
const result = await build({
  entryPoints: ['agent/cli/main.ts'],
  outfile,
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node24',
  sourcemap: false,
  legalComments: 'none',
  banner: { js: nodeGuard },
  define: { KUBEBOOT_VERSION: JSON.stringify(pkg.version) },
  logLevel: 'warning',
  write: false,
});
await mkdir('dist', { recursive: true });
for (const file of result.outputFiles) {
  const temp = `${file.path}.tmp-${process.pid}`;
  await writeFile(temp, file.contents);
  await rename(temp, file.path);
}
