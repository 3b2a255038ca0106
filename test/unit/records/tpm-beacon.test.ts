// The freshness beacon's record, read and rotated (records/tpm-beacon.ts):
// what a quote may bind now, and when the leader writes the next one.
import t from 'tap';
import { newRecord, type TpmBeaconObject } from '../../../agent/records/kinds.js';
import { acceptedBeacons, ROTATE_SECONDS, rotatedBeacon, rotationDueIn } from '../../../agent/records/tpm-beacon.js';

const T = new Date('2026-12-04T13:00:00Z');
const bytes = (n: number) => Buffer.alloc(32, n);
const at = (seconds: number) => new Date(T.getTime() + seconds * 1000);
const withBeacons = (beacons: { value?: string; published?: string }[]): TpmBeaconObject =>
  newRecord('tpmbeacons', 'kubeboot', { spec: { beacons } });

t.test('a rotation puts the new beacon first and keeps only the one before it', async (t) => {
  const first = rotatedBeacon(null, bytes(1), T);
  t.same(acceptedBeacons(first), [bytes(1)], 'a record made anew holds the new beacon alone');
  const second = rotatedBeacon(first, bytes(2), at(ROTATE_SECONDS));
  t.same(acceptedBeacons(second), [bytes(2), bytes(1)]);
  const third = rotatedBeacon(second, bytes(3), at(2 * ROTATE_SECONDS));
  t.same(acceptedBeacons(third), [bytes(3), bytes(2)], 'two rotations on, the first is no longer accepted');
  t.equal(third.spec?.beacons?.[0]?.published, at(2 * ROTATE_SECONDS).toISOString());
  t.throws(() => rotatedBeacon(null, Buffer.alloc(16), T), /32 bytes, not 16/);
  t.same(acceptedBeacons(rotatedBeacon(withBeacons([{ value: 'x' }]), bytes(4), T)), [bytes(4)], 'an unreadable record is replaced whole');
});

t.test('what a quote may bind: none without a record, a problem for a record that cannot be trusted', async (t) => {
  t.same(acceptedBeacons(null), []);
  const good = bytes(7).toString('base64');
  const cases: [string, TpmBeaconObject, RegExp][] = [
    ['no beacons', withBeacons([]), /spec\.beacons does not hold one or two beacons/],
    ['three beacons', withBeacons([{ value: good }, { value: good }, { value: good }]), /does not hold one or two/],
    ['a short value', withBeacons([{ value: Buffer.alloc(16).toString('base64') }]), /spec\.beacons\[0\]\.value is not 32 bytes of base64/],
    ['a second value that is not base64', withBeacons([{ value: good }, { value: `${'!'.repeat(43)}=` }]), /spec\.beacons\[1\]\.value/],
    ['no spec', newRecord('tpmbeacons', 'kubeboot', {}), /does not hold one or two/],
  ];
  for (const [what, record, want] of cases) {
    const got = acceptedBeacons(record);
    t.match('problem' in got ? got.problem : '', want, what);
  }
});

t.test('the leader rotates when the record is missing, unreadable or its newest beacon is due', async (t) => {
  const record = rotatedBeacon(null, bytes(1), T);
  t.equal(rotationDueIn(null, T), 0, 'missing: now');
  t.equal(rotationDueIn(record, T), ROTATE_SECONDS * 1000, 'just published: a whole period');
  t.equal(rotationDueIn(record, at(100)), (ROTATE_SECONDS - 100) * 1000);
  t.equal(rotationDueIn(record, at(ROTATE_SECONDS)), 0, 'due');
  t.equal(rotationDueIn(record, at(10 * ROTATE_SECONDS)), 0, 'long overdue (no leader for a while)');
  t.equal(rotationDueIn(record, at(-2 * ROTATE_SECONDS)), 0, 'dated more than a period ahead (a clock stepped back): now');
  t.equal(rotationDueIn(withBeacons([{ value: bytes(1).toString('base64'), published: 'soon' }]), T), 0, 'no readable date: now');
  t.equal(rotationDueIn(withBeacons([{ value: 'x', published: T.toISOString() }]), T), 0, 'an unreadable beacon: now');
});
