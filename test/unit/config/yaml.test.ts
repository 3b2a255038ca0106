// parseYaml reads operator files and cluster-info's kubeconfig, which comes
// from the server (1 MiB at most): repeated keys are still refused, in time
// linear in the number of keys.
import t from 'tap';
import { cpuMs } from '../../support/cpu-time.js';
import { parseYaml } from '../../../agent/config/yaml.js';

const keys = (n: number) => Array.from({ length: n }, (_, i) => `k${i}: v`).join('\n');

t.test('a key repeated in one mapping is refused with its line, in block and flow style, nested or not', async (t) => {
  t.throws(
    () => parseYaml('f.yaml', 'a: 1\nb: 2\na: 3\n'),
    /f\.yaml: line 3: invalid YAML: duplicate key \(keys must be unique\) at column 1/,
  );
  t.throws(() => parseYaml('f.yaml', 'x:\n  a: 1\n  a: 2\n'), /line 3: invalid YAML: duplicate key/);
  t.throws(() => parseYaml('f.yaml', '{a: 1, b: 2, a: 3}'), /duplicate key/);
  t.throws(() => parseYaml('f.yaml', 'l:\n- a: 1\n  a: 1\n'), /line 3: invalid YAML: duplicate key/);
  t.same(
    parseYaml('f.yaml', 'a: 1\nx: {a: 2}\nl: [{a: 3}, {a: 4}]\n'),
    { a: 1, x: { a: 2 }, l: [{ a: 3 }, { a: 4 }] },
    'the same key in different mappings is fine',
  );
  t.same(parseYaml('f.yaml', '1: a\n"1": b\n'), { 1: 'b' }, 'the number 1 and the string "1" are different keys, as the library has it');
});

t.test('32,768 keys (256 KiB) parse in linear time, and a repeat at the end is found', async (t) => {
  // Linear: well under a second. The library's own check compares each key
  // with every earlier one: about 10 s for these, 158 s for 1 MiB of them.
  const BOUND_MS = 5_000;
  const text = keys(32_768);
  let ms = await cpuMs(() => t.equal(Object.keys(parseYaml('cluster-info', text) as object).length, 32_768));
  t.ok(ms < BOUND_MS, `unique keys: ${Math.round(ms)} ms of CPU (bound ${BOUND_MS} ms)`);
  ms = await cpuMs(() => t.throws(() => parseYaml('cluster-info', `${text}\nk0: again`), /line 32769: invalid YAML: duplicate key/));
  t.ok(ms < BOUND_MS, `a repeat at the end: ${Math.round(ms)} ms of CPU (bound ${BOUND_MS} ms)`);
});
