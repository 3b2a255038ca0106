// The records of agent/records/bindings.ts and migrate.ts, pure: a binding is
// usable only naming its token and its Secret; a name is a Map key (no
// plain-object look-up: `constructor` is nobody's); a mark's time is the API
// server's; the migration plan moves what an earlier release's ConfigMaps say.
import t from 'tap';
import { bindingAllows, bindingRecord, parseBinding, replacementOf } from '../../../agent/records/bindings.js';
import { planMigration } from '../../../agent/records/migrate.js';

const usable = (over: object = {}) => ({ ...bindingRecord('abcdef', { prefix: 'w', maxNodes: 2 }, 'secret-uid'), ...over });

t.test('a binding is trusted only whole: its token id, its Secret, a count, names or a prefix, distinct issued names', async (t) => {
  t.match(parseBinding('abcdef', usable()), { kind: 'prefix', prefix: 'w', maxNodes: 2 });
  t.match(parseBinding('zzzzzz', usable()), { problem: /spec.tokenID "abcdef" is not zzzzzz/ });
  t.match(parseBinding('abcdef', bindingRecord('abcdef', { names: ['n1'] })), { problem: /tokenSecretUID is not set/ });
  const twice = usable({
    status: {
      issued: [
        { node: 'w1', csrUID: 'a' },
        { node: 'w1', csrUID: 'b' },
      ],
    },
  });
  t.match(parseBinding('abcdef', twice), { problem: /distinct/ });
  const both = usable({ spec: { ...usable().spec, names: ['x'] } });
  t.match(parseBinding('abcdef', both), { problem: 'both spec.names and spec.prefix are set' });
});

t.test('a node name is never read off a plain object: `constructor` and `__proto__` are names like any other', async (t) => {
  const binding = parseBinding(
    'abcdef',
    usable({ spec: { tokenID: 'abcdef', names: ['constructor', '__proto__'], maxNodes: 2, tokenSecretUID: 'u' } }),
  );
  if ('problem' in binding) throw new Error(binding.problem);
  t.equal(bindingAllows(binding, 'constructor', 'uid-1'), null, 'constructor is free');
  t.equal(bindingAllows(binding, '__proto__', 'uid-2'), null, '__proto__ is free');
  const spent = parseBinding('abcdef', usable({ status: { issued: [{ node: 'constructor', csrUID: 'uid-1' }] } }));
  if ('problem' in spent) throw new Error(spent.problem);
  t.equal(spent.issued.size, 1);
  t.equal(bindingAllows(spent, 'w2', 'uid-2'), null, 'one of two spent');
});

t.test("a name another token spent is refused, naming the mark that would free it; the same CSR's own claim passes", async (t) => {
  const binding = parseBinding('abcdef', usable());
  if ('problem' in binding) throw new Error(binding.problem);
  t.match(
    bindingAllows({ ...binding, nameTaken: { tokenId: 'other1', csrUid: 'u9' } }, 'w1', 'u1'),
    /w1 was already spent on token other1 .*kubeboot node replace w1/,
  );
  t.equal(bindingAllows({ ...binding, nameTaken: { tokenId: 'abcdef', csrUid: 'u1' } }, 'w1', 'u1'), null);
});

t.test("a mark's time is its creationTimestamp; it is for one token", async (t) => {
  t.same(
    replacementOf({
      kind: 'NodeReplacement',
      metadata: { name: 'n1', creationTimestamp: '2026-12-01T10:00:00Z' },
      spec: { tokenID: 'abcdef' },
    }),
    { at: '2026-12-01T10:00:00Z', tokenId: 'abcdef', claimedBy: null },
  );
});

t.test(
  'the migration plan: a binding with its spent names and Secret, open marks, revocations with their time, the inventory',
  async (t) => {
    const plans = planMigration(
      [
        {
          metadata: { name: 'token-abcdef', annotations: { 'kubeboot.io/issued': '{"w1":"u1"}' } },
          data: { prefix: 'w', 'max-nodes': '3' },
        },
        { metadata: { name: 'token-bad' }, data: {} },
        { metadata: { name: 'token-zzzzzz' }, data: { names: 'a', 'max-nodes': 'x' } },
        {
          metadata: { name: 'replacements' },
          data: { open: '{"at":"t1","claimedBy":null}', done: '{"at":"t2","claimedBy":"c"}', bad: 'x' },
        },
        { metadata: { name: 'revocations' }, data: { gone: '{"at":"t3","reason":"stolen"}', odd: 'not json' } },
        { metadata: { name: 'inventory' }, data: { n1: 'ips: 10.0.0.1' } },
        { metadata: { name: 'unrelated' }, data: {} },
      ],
      (id) => (id === 'abcdef' ? 'secret-uid' : null),
    );
    t.same(
      plans.map((p) => p.configMap),
      ['kubeboot/inventory', 'kubeboot/replacements', 'kubeboot/revocations', 'kubeboot/token-abcdef', 'kubeboot/token-zzzzzz'],
      'only kubeboot records; token-bad holds no token id',
    );
    const token = plans.find((p) => p.configMap === 'kubeboot/token-abcdef')!;
    t.match(token.records[0], {
      resource: 'tokenbindings',
      object: { spec: { tokenID: 'abcdef', prefix: 'w', maxNodes: 3, tokenSecretUID: 'secret-uid' } },
      status: { issued: [{ node: 'w1', csrUID: 'u1' }] },
    });
    t.match(token.records[1], { resource: 'nodeclaims', object: { metadata: { name: 'w1' }, spec: { tokenID: 'abcdef', csrUID: 'u1' } } });
    t.match(
      plans.find((p) => p.configMap === 'kubeboot/token-zzzzzz'),
      { problem: /max-nodes/, records: [] },
      'a binding that does not parse is left, named',
    );
    const marks = plans.find((p) => p.configMap === 'kubeboot/replacements')!;
    t.same(
      marks.records.map((r) => [r.object.metadata.name, (r.object as { spec: object }).spec]),
      [['open', { tokenID: '' }]],
    );
    t.match(marks.notes, [/done was claimed/, /bad is not a mark/]);
    const revocations = plans.find((p) => p.configMap === 'kubeboot/revocations')!;
    t.same(
      revocations.records.map((r) => [r.object.metadata.name, (r.object as { spec: { reason: string } }).spec.reason]),
      [
        ['gone', 'stolen (revoked t3, moved from ConfigMap kubeboot/revocations)'],
        ['odd', '(revoked ?, moved from ConfigMap kubeboot/revocations)'],
      ],
      'an entry that does not parse still revokes (fail closed)',
    );
  },
);
