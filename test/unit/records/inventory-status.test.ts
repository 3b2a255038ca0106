// What `kubeboot approver --inventory` says of inventories.kubeboot.io/inventory (records/inventory-status.ts):
// missing, how many nodes it lists, or why it could not be read; /readyz looks again at most once a minute.
import t from 'tap';
import { inventoryStatus } from '../../../agent/records/inventory-status.js';
import { FakeClock } from '../../support/fake-time.js';

/** The look the line started has answered. */
const settle = () => new Promise((resolve) => setImmediate(resolve));

t.test('a look says whether the inventory exists and how many nodes it lists, or why it could not be read', async (t) => {
  const answers = [null, { 'worker-1': '', 'worker-2': 'ips: 10.0.0.7' }, new Error('forbidden')];
  const status = inventoryStatus(async () => {
    const next = answers.shift()!;
    if (next instanceof Error) throw next;
    return next;
  }, new FakeClock());
  t.same(await status.look(), {
    ok: false,
    text: 'missing: no kubelet client or serving CSR is approved until inventories.kubeboot.io/inventory exists',
  });
  t.same(await status.look(), { ok: true, text: '2 node(s) listed' });
  t.same(await status.look(), { ok: false, text: 'could not read inventories.kubeboot.io/inventory: forbidden' });
});

t.test("/readyz's line shows the last look and looks again only once it is a minute old", async (t) => {
  const clock = new FakeClock();
  let reads = 0;
  const status = inventoryStatus(async () => Object.fromEntries(Array.from({ length: ++reads }, (_, i) => [`n${i}`, ''])), clock);
  t.equal(status.detail(), 'inventory inventories.kubeboot.io/inventory: not looked at yet', 'the first line starts a look');
  await settle();
  t.equal(status.detail(), 'inventory inventories.kubeboot.io/inventory: 1 node(s) listed');
  clock.advance(59_999);
  t.equal(status.detail(), 'inventory inventories.kubeboot.io/inventory: 1 node(s) listed');
  t.equal(reads, 1, 'not looked at again within the minute');
  clock.advance(1);
  status.detail();
  await settle();
  t.equal(reads, 2);
  t.equal(status.detail(), 'inventory inventories.kubeboot.io/inventory: 2 node(s) listed');
});
