import t from 'tap';
import { isDue, renewalDeadline } from '../../../agent/renewal/deadline.js';

const DAY = 24 * 60 * 60 * 1000;
const MIN = 60 * 1000;
const issued = new Date('2025-01-01T00:00:00Z');
const yearCert = { notBefore: issued, notAfter: new Date(issued.getTime() + 365 * DAY) };
const fraction = (d: Date) => (d.getTime() - issued.getTime()) / (365 * DAY);

t.test('a one-year certificate is renewed between 70 % and 90 % of its lifetime, like the kubelet', async (t) => {
  t.equal(fraction(renewalDeadline(yearCert, { margin: 0 }, () => 0)), 0.7);
  const late = fraction(renewalDeadline(yearCert, { margin: 0 }, () => 0.999999));
  t.ok(late > 0.89 && late <= 0.9, `deadline at ${late} of the lifetime`);
  t.equal(fraction(renewalDeadline(yearCert, { margin: 0 }, () => 0.5)), 0.8);
});

t.test('the margin brings the deadline earlier when it is tighter than the 70 % point', async (t) => {
  // 200-day margin on a 365-day cert: notAfter − 200 d = day 165, before day 255.5 (70 %).
  const d = renewalDeadline(yearCert, { margin: 200 * 86400 }, () => 0);
  t.equal(d.getTime(), yearCert.notAfter.getTime() - 200 * DAY);
});

t.test('a margin looser than the jitter window changes nothing', async (t) => {
  const d = renewalDeadline(yearCert, { margin: 86400 }, () => 0.5);
  t.equal(fraction(d), 0.8);
});

t.test('a 10-minute certificate with a 5-minute margin is renewed 5 minutes after notBefore', async (t) => {
  // The signer backdates notBefore 5 min, so that point is "now" at issue.
  const cert = { notBefore: issued, notAfter: new Date(issued.getTime() + 10 * MIN) };
  const d = renewalDeadline(cert, { margin: 300 }, () => 0.999);
  t.equal(d.getTime(), issued.getTime() + 5 * MIN);
  t.ok(isDue(d, new Date(issued.getTime() + 5 * MIN)), 'due at issue time');
});

t.test('a margin longer than the lifetime makes the certificate due at once', async (t) => {
  const cert = { notBefore: issued, notAfter: new Date(issued.getTime() + 10 * MIN) };
  const d = renewalDeadline(cert, { margin: 3600 }, () => 0.3);
  t.equal(d.getTime(), issued.getTime());
  t.ok(isDue(d, issued));
});

t.test('an inverted validity window yields notBefore rather than a time before it', async (t) => {
  const cert = { notBefore: issued, notAfter: new Date(issued.getTime() - DAY) };
  t.equal(renewalDeadline(cert, { margin: 0 }, () => 0.5).getTime(), issued.getTime());
});

t.test('isDue is true from the deadline on and false before it', async (t) => {
  const deadline = new Date(issued.getTime() + 1000);
  t.notOk(isDue(deadline, new Date(issued.getTime() + 999)));
  t.ok(isDue(deadline, deadline));
  t.ok(isDue(deadline, new Date(issued.getTime() + 5000)));
});
