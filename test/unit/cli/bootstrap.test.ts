import t from 'tap';
import { resultLine } from '../../../agent/cli/bootstrap.js';

t.test('the result line rounds the store time to whole milliseconds', async (t) => {
  const line = resultLine({
    identity: 'kubelet',
    notAfter: new Date('2027-01-01T00:00:00Z'),
    issued: {
      csrName: 'node-csr-abc',
      waitedSeconds: 1.23456,
      storeMillis: 32.073753000000124,
    },
  });
  t.match(line, /approved after 1\.235s, on disk 32 ms later/);
  t.notMatch(line, /32\.07/);
});
