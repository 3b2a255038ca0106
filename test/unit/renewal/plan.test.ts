// The renewal loop's decisions as tables: what to do next, how long to wait
// after a failure, and when a loop counts as stuck.
import t from 'tap';
import { IDENTITY_ROLES } from '../../../agent/config/identities.js';
import type { Assessment, NodeCredential } from '../../../agent/credential/assess.js';
import { ApiError, CsrRejectedError, KubebootError, NeedsBootstrapError, TimedOutError } from '../../../agent/errors.js';
import type { Identity } from '../../../agent/identity.js';
import { deadlineFor, nextAction, progressBy, RECHECK_MS, RENEW_BACKOFF, retryPlan } from '../../../agent/renewal/plan.js';
import { MIN_RETRY_MS } from '../../../agent/time/backoff.js';
import { kubeletIdentity } from '../../support/identity.js';

const now = new Date('2026-06-01T12:00:00Z');
const at = (offsetMs: number) => new Date(now.getTime() + offsetMs);
const cluster = { server: 'https://127.0.0.1:6443', caPem: 'CA', tlsServerName: null };
const kubelet = kubeletIdentity();
const proxy: Identity = {
  ...kubeletIdentity(),
  name: 'kube-proxy',
  ...IDENTITY_ROLES['kube-proxy'],
  subject: { commonName: 'system:kube-proxy', organizations: [] },
  filePrefix: 'kube-proxy-client',
};

const usable = (identity: Identity, notAfter: Date): NodeCredential => ({
  identity,
  state: 'usable',
  certPem: 'CERT',
  keyPem: 'KEY',
  notAfter,
  cluster,
});
const unusable = (identity: Identity, reason: string): Assessment => ({ identity, state: 'unusable', reason, cluster: null });

t.test('nextAction: what a pass does', async (t) => {
  const node = usable(kubelet, at(3_600_000));
  const cases: { name: string; input: Parameters<typeof nextAction>[0]; kind: string; match?: RegExp }[] = [
    {
      name: 'valid and not due: sleep until the deadline',
      input: { own: node, requester: node, kubeletProblem: null, deadline: at(60_000), force: false, now },
      kind: 'sleep',
    },
    {
      name: 'valid and due: renew with the node credential',
      input: { own: node, requester: node, kubeletProblem: null, deadline: at(-1), force: false, now },
      kind: 'renew',
      match: /renewal due/,
    },
    {
      name: 'valid, not due, but forced: renew',
      input: { own: node, requester: node, kubeletProblem: null, deadline: at(60_000), force: true, now },
      kind: 'renew',
      match: /requested/,
    },
    {
      name: 'kubelet without anything that authenticates: bootstrap',
      input: { own: unusable(kubelet, 'expired'), requester: null, kubeletProblem: 'expired', deadline: null, force: false, now },
      kind: 'bootstrap',
      match: /expired/,
    },
    {
      name: 'kubelet files gone but a good one in memory: renew with it',
      input: { own: unusable(kubelet, 'missing'), requester: node, kubeletProblem: 'missing', deadline: null, force: false, now },
      kind: 'renew',
      match: /needs a certificate \(missing\)/,
    },
    {
      name: 'kube-proxy while the kubelet has nothing: wait for the kubelet',
      input: { own: unusable(proxy, 'missing'), requester: null, kubeletProblem: 'no kubelet.conf', deadline: null, force: false, now },
      kind: 'wait-for-kubelet',
      match: /no kubelet\.conf/,
    },
    {
      name: 'kube-proxy missing while the kubelet is valid: request it with the node credential',
      input: { own: unusable(proxy, 'missing'), requester: node, kubeletProblem: null, deadline: null, force: false, now },
      kind: 'renew',
    },
  ];
  for (const c of cases) {
    const action = nextAction(c.input);
    t.equal(action.kind, c.kind, c.name);
    if (c.match && 'why' in action) t.match(action.why, c.match, `${c.name}: says why`);
    if (action.kind === 'sleep') t.same(action.until, c.input.deadline, `${c.name}: until the deadline`);
    if (action.kind === 'wait-for-kubelet') t.same(action.until, at(RECHECK_MS), `${c.name}: looks again after the recheck interval`);
    if (action.kind === 'renew') t.equal(action.requester, c.input.requester, `${c.name}: authenticated by the node credential`);
  }
});

t.test('deadlineFor: 70-90 % of the lifetime, held 5 % of the remaining lifetime after the last success', async (t) => {
  const cert = { notBefore: new Date('2026-06-01T00:00:00Z'), notAfter: new Date('2026-06-01T10:00:00Z') };
  t.same(
    deadlineFor(cert, 0, () => 0, null),
    { at: new Date('2026-06-01T07:00:00Z'), held: false },
    'random 0: 70 %',
  );
  t.same(
    deadlineFor(cert, 0, () => 1, null),
    { at: new Date('2026-06-01T09:00:00Z'), held: false },
    'random 1: 90 %',
  );
  // A margin of 9h59m puts the deadline one minute in; the last success was at 00:00, so it is held until 5 % of 10 h = 30 min later.
  t.same(
    deadlineFor(cert, 35_940, () => 0.5, cert.notBefore),
    { at: new Date('2026-06-01T00:30:00Z'), held: true },
    'a margin near the lifetime is clamped',
  );
  t.same(
    deadlineFor(cert, 35_940, () => 0.5, null),
    { at: new Date('2026-06-01T00:01:00Z'), held: false },
    'without a previous success there is nothing to hold to: one minute in',
  );
});

t.test('retryPlan: how long after a failure', async (t) => {
  const random = () => 0;
  const lifetime = at(16 * 60_000);
  const http = (status: number, retryAfter?: string) =>
    new ApiError({ method: 'POST', path: '/x', status, reason: 'R', message: '', retryAfter });
  const cases: { name: string; err: unknown; attempt: number; notAfter: Date | null; reason: string; waitMs: number; next: number }[] = [
    {
      name: 'first transport failure: 2 s backoff',
      err: new KubebootError('ECONNRESET'),
      attempt: 0,
      notAfter: lifetime,
      reason: 'error',
      waitMs: 2_000,
      next: 1,
    },
    { name: 'fourth failure: 16 s', err: new KubebootError('x'), attempt: 3, notAfter: lifetime, reason: 'error', waitMs: 16_000, next: 4 },
    {
      name: 'backoff grows to the cap',
      err: new KubebootError('x'),
      attempt: 30,
      notAfter: null,
      reason: 'error',
      waitMs: RENEW_BACKOFF.cap,
      next: 31,
    },
    {
      name: 'Retry-After is obeyed and does not advance the backoff',
      err: http(429, '7'),
      attempt: 2,
      notAfter: lifetime,
      reason: 'http-429',
      waitMs: 7_000,
      next: 2,
    },
    {
      name: 'Retry-After of a year is capped at the backoff cap',
      err: http(503, '31536000'),
      attempt: 0,
      notAfter: null,
      reason: 'http-503',
      waitMs: RENEW_BACKOFF.cap,
      next: 0,
    },
    {
      name: 'and at the remaining lifetime',
      err: http(503, '31536000'),
      attempt: 0,
      notAfter: at(90_000),
      reason: 'http-503',
      waitMs: 90_000,
      next: 0,
    },
    {
      name: 'a 500 without Retry-After backs off',
      err: http(500),
      attempt: 1,
      notAfter: lifetime,
      reason: 'http-500',
      waitMs: 4_000,
      next: 2,
    },
    {
      name: 'a denied CSR waits the full cap',
      err: new CsrRejectedError('denied'),
      attempt: 0,
      notAfter: null,
      reason: 'denied',
      waitMs: RENEW_BACKOFF.cap,
      next: 0,
    },
    {
      name: 'a timeout backs off',
      err: new TimedOutError('slow'),
      attempt: 0,
      notAfter: lifetime,
      reason: 'timeout',
      waitMs: 2_000,
      next: 1,
    },
    {
      name: 'needing a bootstrap kubeconfig rechecks each minute',
      err: new NeedsBootstrapError('expired'),
      attempt: 4,
      notAfter: null,
      reason: 'needs-bootstrap',
      waitMs: RECHECK_MS,
      next: 4,
    },
    {
      name: 'a Retry-After of 0 is still not a hot loop',
      err: http(429, '0'),
      attempt: 0,
      notAfter: lifetime,
      reason: 'http-429',
      waitMs: MIN_RETRY_MS,
      next: 0,
    },
    {
      name: 'a certificate about to expire still waits at least the minimum',
      err: new KubebootError('x'),
      attempt: 0,
      notAfter: at(10),
      reason: 'error',
      waitMs: MIN_RETRY_MS,
      next: 1,
    },
  ];
  for (const c of cases) {
    t.same(
      retryPlan(c.err, c.attempt, { now, notAfter: c.notAfter, random }),
      { reason: c.reason, waitMs: c.waitMs, attempt: c.next },
      c.name,
    );
  }
});

t.test('progressBy: what may take a span shows progress within it and the grace', async (t) => {
  t.equal(progressBy(1_000, 60_000), 91_000, 'a chunk of sleep');
  t.equal(progressBy(1_000, 1_800_000), 1_831_000, 'a step gets its longest duration');
});
