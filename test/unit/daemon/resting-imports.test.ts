// What the resting daemon loads: everything `kubeboot run` reaches through
// static imports from cli/run.ts (the supervisor, its look at cluster-info),
// as the product's bundler splits it. A pass's libraries arrive only with a
// pass process (dynamic import in cli/main.ts); one static import of them
// here would put them in every idle node's memory.
import { build } from 'esbuild';
import t from 'tap';

const root = new URL('../../../', import.meta.url).pathname;

const result = await build({
  entryPoints: { main: 'agent/cli/main.ts', run: 'agent/cli/run.ts' },
  absWorkingDir: root,
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  outdir: 'dist/resting-imports-test',
  metafile: true,
  write: false,
  logLevel: 'error',
});
const outputs = result.metafile.outputs;
const entry = Object.keys(outputs).find((o) => outputs[o]!.entryPoint === 'agent/cli/run.ts')!;
const reached = new Set<string>();
const visit = (file: string): void => {
  if (reached.has(file)) return;
  reached.add(file);
  for (const i of outputs[file]!.imports) if (i.kind === 'import-statement' && outputs[i.path]) visit(i.path);
};
visit(entry);
const inputs = [...reached].flatMap((f) => Object.keys(outputs[f]!.inputs));
const packages = new Set(inputs.filter((i) => i.includes('node_modules/')).map((i) => i.split('node_modules/')[1]!.split('/')[0]!));

t.test('the resting daemon loads none of the libraries a pass needs', async (t) => {
  for (const library of ['undici', '@peculiar', 'yaml', 'winston', 'prom-client'])
    t.notOk(packages.has(library), `${library} is not loaded at rest`);
  t.same([...packages].sort(), ['chokidar', 'readdirp'], 'only the file watcher');
});

t.test('its own look at cluster-info is part of it, and the CA keeper is not', async (t) => {
  t.ok(inputs.includes('agent/daemon/ca-look-get.ts'), 'the GET');
  t.ok(inputs.includes('agent/kube/cluster-info-digest.ts'), 'the digest');
  t.notOk(inputs.includes('agent/trust/keeper.ts'), 'only the keeper’s types');
  t.notOk(inputs.includes('agent/kube/client.ts'), 'nor the API client');
});
