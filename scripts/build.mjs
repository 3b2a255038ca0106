// Bundles the agent into one CommonJS file, dist/kubeboot.cjs: the form both
// `node dist/kubeboot.cjs` and a Node single executable application can run.
import { build } from 'esbuild';
import { readFile } from 'node:fs/promises';

const pkg = JSON.parse(await readFile(new URL('../package.json', import.meta.url), 'utf8'));
await build({
  entryPoints: ['agent/cli/main.ts'],
  outfile: 'dist/kubeboot.cjs',
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node24',
  sourcemap: false,
  legalComments: 'none',
  define: { KUBEBOOT_VERSION: JSON.stringify(pkg.version) },
  logLevel: 'warning',
});
