// Bundles the agent into one CommonJS file, dist/kubeboot.cjs: the form both
// `node dist/kubeboot.cjs` and a Node single executable application can run.
// The bundle replaces the old one by rename, so a kubeboot started meanwhile
// (the test suite rebuilds while other tests run it) reads a whole file.
import { build } from 'esbuild';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';

const outfile = 'dist/kubeboot.cjs';
const pkg = JSON.parse(await readFile(new URL('../package.json', import.meta.url), 'utf8'));
const result = await build({
  entryPoints: ['agent/cli/main.ts'],
  outfile,
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node24',
  sourcemap: false,
  legalComments: 'none',
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
