// Prints the licence texts that must travel with the packages: Node's own
// LICENSE (which covers the libraries built into the binary), then every
// production npm package in package-lock.json, since esbuild bundles them
// with legalComments: 'none'.
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

const [root, nodeLicense] = process.argv.slice(2);
const out = [`Node.js\n${'='.repeat(72)}\n`, readFileSync(nodeLicense, 'utf8')];
const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8'));
for (const [path, meta] of Object.entries(lock.packages)) {
  if (path === '' || meta.dev) continue;
  const dir = join(root, path);
  const file = readdirSync(dir).find((f) => /^(licen[cs]e|copying)(\.|$)/i.test(f));
  if (file === undefined) throw new Error(`${path}: no licence file to ship`);
  const name = path.replace(/^.*node_modules\//, '');
  out.push(`\n${name} ${meta.version} (${meta.license})\n${'='.repeat(72)}\n`, readFileSync(join(dir, file), 'utf8'));
}
process.stdout.write(out.join(''));
