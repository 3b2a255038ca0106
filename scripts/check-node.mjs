// Refuses to run the suite on any Node but the pinned one: the packages ship
// the Node version the tests ran on.
import { readFileSync } from 'node:fs';
const want = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')).kubeboot.node;
if (process.version !== `v${want}`) {
  console.error(
    `kubeboot: tests need Node v${want} (package.json "kubeboot.node"), this is ${process.version}; run through make, which puts it on PATH`,
  );
  process.exit(1);
}
