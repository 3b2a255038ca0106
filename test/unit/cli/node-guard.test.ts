import t from 'tap';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const bundle = fileURLToPath(new URL('../../../dist/kubeboot.cjs', import.meta.url));
const major = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')).kubeboot.node.split('.')[0];

t.test('the bundle says which Node it needs instead of crashing on an older one', async (t) => {
  // Pretend to be Node 20 before the bundle runs: what `node dist/kubeboot.cjs` on an old distro Node sees.
  const pretend = `Object.defineProperty(process, 'versions', { value: { ...process.versions, node: '20.20.2' } });`;
  const r = spawnSync(process.execPath, ['--eval', `${pretend} require(${JSON.stringify(bundle)})`, 'bootstrap'], { encoding: 'utf8' });
  t.equal(r.stderr, `kubeboot: needs Node.js ${major} or newer; this is Node.js 20.20.2\n`);
  t.equal(r.status, 1);
  t.equal(r.stdout, '');
});

t.test('the bundle runs on the pinned Node', async (t) => {
  const r = spawnSync(process.execPath, [bundle, '--version'], { encoding: 'utf8' });
  t.equal(r.status, 0);
  t.match(r.stdout, /^kubeboot \S+ \(node v/);
});
