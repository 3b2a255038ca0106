import t from 'tap';
import {
  formatDuration,
  parseDuration,
  parseListen,
  parseByteSize,
  parsePin,
  dns1123SubdomainProblem,
  labelRequirementProblem,
} from '../../../agent/config/values.js';

t.test('durations are whole seconds or Go-like h/m/s', async (t) => {
  const cases: [unknown, number][] = [
    [90, 90],
    ['90', 90],
    ['90s', 90],
    ['15m', 900],
    ['1h', 3600],
    ['2h30m', 9000],
    ['1h0m5s', 3605],
    [' 10m ', 600],
  ];
  for (const [raw, want] of cases) t.same(parseDuration(raw), { ok: true, value: want }, String(raw));
  for (const raw of ['', '1.5h', '300ms', '30m1h', '-5', '1d', 'h', -1, 1.5, true]) t.equal(parseDuration(raw).ok, false, String(raw));
});

t.test('formatDuration inverts parseDuration', async (t) => {
  for (const s of [0, 1, 59, 60, 900, 3600, 3605, 9000, 86400]) t.same(parseDuration(formatDuration(s)), { ok: true, value: s }, String(s));
});

t.test('listen is host:port, [v6]:port or off', async (t) => {
  t.same(parseListen('off'), { ok: true, value: null });
  t.same(parseListen('0.0.0.0:1'), { ok: true, value: '0.0.0.0:1' });
  t.same(parseListen('[::1]:10258'), { ok: true, value: '[::1]:10258' });
  for (const raw of [':10258', 'host:0', 'host:65536', '[zz]:80', 'a:b:80', 'localhost']) t.equal(parseListen(raw).ok, false, raw);
});

t.test('pins are sha256 plus 64 hex digits, any case', async (t) => {
  t.same(parsePin(`SHA256:${'F'.repeat(64)}`), { ok: true, value: `sha256:${'f'.repeat(64)}` });
  t.equal(parsePin(`sha256:${'f'.repeat(63)}g`).ok, false);
});

t.test('node names follow DNS-1123 subdomain rules', async (t) => {
  for (const ok of ['a', 'worker-1', 'node.example.com', '1.2.3.4']) t.equal(dns1123SubdomainProblem(ok), null, ok);
  for (const bad of ['', '-a', 'a-', 'a..b', 'A', 'a_b', `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(63)}`]) {
    t.not(dns1123SubdomainProblem(bad), null, bad);
  }
});

t.test('--protect-nodes takes one label requirement each: key or key=value', async (t) => {
  for (const ok of ['node-role.kubernetes.io/control-plane', 'tier', 'example.com/tier=db', 'a=', 'A_b.c=X-1'])
    t.equal(labelRequirementProblem(ok), null, ok);
  for (const bad of ['', '=db', 'a=b=c', 'Example..com/x', '/x', 'x/', 'a b', 'tier!=db', `${'x'.repeat(64)}`, 'a=-b'])
    t.match(labelRequirementProblem(bad), /expected a label key or key=value/, JSON.stringify(bad));
});

t.test('parseByteSize reads bytes as Kubernetes quantities write them', async (t) => {
  t.same(parseByteSize('4Mi'), { ok: true, value: 4 << 20 });
  t.same(parseByteSize('512Ki'), { ok: true, value: 512 << 10 });
  t.same(parseByteSize('65536'), { ok: true, value: 65536 });
  t.match(parseByteSize('4MB'), { ok: false, problem: /expected a size in bytes like 4Mi, 512Ki or 4194304, got/ });
  t.match(parseByteSize('-1'), { ok: false });
});
