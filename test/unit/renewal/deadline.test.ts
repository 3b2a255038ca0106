import t from 'tap';
import { CONSUMER_LEAD_MS, CONSUMER_RELOAD_MS, CONSUMER_SLACK_MS, isDue, renewalDeadline } from '../../../agent/renewal/deadline.js';

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

// kube-controller-manager's signer backdates notBefore 5 minutes; a
// certificate asked for 10 minutes (the API's minimum) spans 15.
const kcmShort = (issuedAt: Date, minutes: number) => ({
  notBefore: new Date(issuedAt.getTime() - 5 * MIN),
  notAfter: new Date(issuedAt.getTime() + minutes * MIN),
});

t.test(
  'the shortest certificate a cluster issues is renewed 6 minutes before it expires, so client-go consumers switch in time',
  async (t) => {
    const cert = kcmShort(issued, 10);
    for (const r of [0, 0.5, 0.999999]) {
      const d = renewalDeadline(cert, { margin: 0 }, () => r);
      t.equal(d.getTime(), cert.notAfter.getTime() - CONSUMER_LEAD_MS, `random ${r}: notAfter − 6 min, whatever the jitter drew`);
      // A consumer's 5-minute check that loaded the old file just before the
      // renewal runs again while that file is still valid.
      t.ok(cert.notAfter.getTime() - d.getTime() >= CONSUMER_RELOAD_MS + CONSUMER_SLACK_MS, 'leaves the reload period plus slack');
    }
    t.equal(CONSUMER_RELOAD_MS, 5 * MIN, 'client-go CertCallbackRefreshDuration');
  },
);

t.test('without the consumer lead the jitter alone would leave a 10-minute certificate less than the reload period', async (t) => {
  const cert = kcmShort(issued, 10);
  const lifetime = cert.notAfter.getTime() - cert.notBefore.getTime();
  const jitterLatest = cert.notBefore.getTime() + 0.9 * lifetime;
  t.ok(cert.notAfter.getTime() - jitterLatest < CONSUMER_RELOAD_MS, 'the 90 % point is 1.5 min before expiry');
});

t.test('the consumer lead changes nothing once the jitter window ends more than 6 minutes before expiry', async (t) => {
  // 1 h certificate: the 90 % point is 6.5 min before notAfter.
  const cert = kcmShort(issued, 60);
  const lifetime = cert.notAfter.getTime() - cert.notBefore.getTime();
  for (const r of [0, 0.5, 0.999999]) {
    const d = renewalDeadline(cert, { margin: 0 }, () => r);
    t.equal(d.getTime(), Math.floor(cert.notBefore.getTime() + lifetime * (0.7 + 0.2 * r)));
  }
  t.equal(fraction(renewalDeadline(yearCert, { margin: 0 }, () => 0.5)), 0.8, 'a year-long certificate still renews at 80 %');
});

t.test('a 15-minute certificate is renewed at notAfter − 6 min only when the jitter would be later', async (t) => {
  const cert = kcmShort(issued, 15); // lifetime 20 min: jitter at 14–18 min after notBefore, lead at 14 min
  t.equal(renewalDeadline(cert, { margin: 0 }, () => 0).getTime(), cert.notBefore.getTime() + 14 * MIN);
  t.equal(renewalDeadline(cert, { margin: 0 }, () => 0.999999).getTime(), cert.notAfter.getTime() - CONSUMER_LEAD_MS);
});

t.test('a certificate shorter than twice the consumer lead is renewed at half its lifetime, not at once', async (t) => {
  const cert = { notBefore: issued, notAfter: new Date(issued.getTime() + 8 * MIN) };
  const d = renewalDeadline(cert, { margin: 0 }, () => 0.5);
  t.equal(d.getTime(), issued.getTime() + 4 * MIN);
  t.notOk(isDue(d, issued), 'not due when issued');
});

t.test("the operator's margin still wins over the consumer lead when it is earlier", async (t) => {
  const cert = kcmShort(issued, 10);
  t.equal(renewalDeadline(cert, { margin: 590 }, () => 0.5).getTime(), cert.notAfter.getTime() - 590_000);
});
