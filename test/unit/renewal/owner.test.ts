// Who renews the kubelet's client certificate, kubeboot or the kubelet's own
// rotation, as tables: exactly one of them, decided from kubelet.renewal and
// the kubelet's configuration file; and what a pass does when it is the kubelet.
import t from 'tap';
import type { Assessment, NodeCredential } from '../../../agent/credential/assess.js';
import { kubeletRenewer, readRotateCertificates } from '../../../agent/renewal/owner.js';
import { nextAction, STEP_ASIDE_RECHECK_MS, STEP_ASIDE_SETTLE_MS } from '../../../agent/renewal/plan.js';
import { kubeletIdentity } from '../../support/identity.js';

const FILE = '/var/lib/kubelet/config.yaml';
const config = (body: string) => `apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n${body}`;

t.test('readRotateCertificates: the kubelet configuration file, one line per problem', async (t) => {
  const cases: [string, string, ReturnType<typeof readRotateCertificates>][] = [
    ['set true', config('rotateCertificates: true\n'), { rotate: true }],
    ['set false', config('rotateCertificates: false\n'), { rotate: false }],
    ['unset: the v1beta1 default is false', config('cgroupDriver: systemd\n'), { rotate: false }],
    ['an empty file: every default', '', { rotate: false }],
    ['JSON is YAML', '{"kind":"KubeletConfiguration","rotateCertificates":true}', { rotate: true }],
    [
      'a string is not a boolean',
      config('rotateCertificates: "true"\n'),
      { problem: `${FILE}: rotateCertificates: expected true or false, got string` },
    ],
    [
      'yes is a string in YAML 1.2',
      config('rotateCertificates: yes\n'),
      { problem: `${FILE}: rotateCertificates: expected true or false, got string` },
    ],
    [
      'another kind',
      'kind: KubeProxyConfiguration\n',
      { problem: `${FILE}: kind: expected KubeletConfiguration, got KubeProxyConfiguration` },
    ],
    ['not a mapping', '- rotateCertificates\n', { problem: `${FILE}: (document): expected a KubeletConfiguration mapping` }],
    [
      'not YAML',
      'rotateCertificates: [true\n',
      { problem: `${FILE}: line 2: invalid YAML: bad indentation, or an unclosed [ or { at column 1` },
    ],
  ];
  for (const [name, text, want] of cases) {
    const got = readRotateCertificates(FILE, text);
    t.same(got, want, name);
    if ('problem' in got) t.notMatch(got.problem, /\n/, `${name}: one line`);
  }
});

t.test('kubeletRenewer: exactly one party renews', async (t) => {
  const rotating = config('rotateCertificates: true\n');
  const notRotating = config('rotateCertificates: false\n');
  const cases: {
    name: string;
    mode: 'auto' | 'kubeboot' | 'kubelet';
    text: string | null | { problem: string };
    by: string;
    warning: RegExp | null;
  }[] = [
    { name: 'auto, the kubelet rotates: it renews, kubeboot steps aside', mode: 'auto', text: rotating, by: 'kubelet', warning: null },
    { name: 'auto, the kubelet does not rotate: kubeboot renews', mode: 'auto', text: notRotating, by: 'kubeboot', warning: null },
    { name: 'auto, no file: the kubelet default, kubeboot renews', mode: 'auto', text: null, by: 'kubeboot', warning: null },
    {
      name: 'auto, a broken file: kubeboot renews and says why',
      mode: 'auto',
      text: 'kind: [',
      by: 'kubeboot',
      warning: /config\.yaml: line \d+: invalid YAML.*kubeboot renews/,
    },
    {
      name: 'auto, an unreadable file: kubeboot renews and says why',
      mode: 'auto',
      text: { problem: `${FILE}: is a directory` },
      by: 'kubeboot',
      warning: /is a directory; kubeboot renews/,
    },
    { name: 'kubeboot, the kubelet does not rotate: kubeboot renews', mode: 'kubeboot', text: notRotating, by: 'kubeboot', warning: null },
    {
      name: 'kubeboot, but the kubelet rotates: kubeboot renews and warns that both do',
      mode: 'kubeboot',
      text: rotating,
      by: 'kubeboot',
      warning: /sets rotateCertificates: true: the kubelet renews as well.*set rotateCertificates: false/,
    },
    { name: 'kubelet, and it rotates: the kubelet renews', mode: 'kubelet', text: rotating, by: 'kubelet', warning: null },
    {
      name: 'kubelet, but the file says no rotation: the kubelet renews (a flag may say otherwise), with a warning',
      mode: 'kubelet',
      text: notRotating,
      by: 'kubelet',
      warning: /does not set rotateCertificates: true: unless the kubelet runs with --rotate-certificates, nobody renews/,
    },
  ];
  for (const c of cases) {
    const got = kubeletRenewer(c.mode, FILE, c.text);
    t.equal(got.by, c.by, `${c.name}: renewed by ${c.by}`);
    if (c.warning === null) t.equal(got.warning, null, `${c.name}: no warning`);
    else t.match(got.warning ?? '', c.warning, `${c.name}: warns`);
    t.notMatch(got.why + (got.warning ?? ''), /\n/, `${c.name}: each a single line`);
  }
});

t.test('nextAction when the kubelet renews its own certificate', async (t) => {
  const now = new Date('2026-06-01T12:00:00Z');
  const at = (ms: number) => new Date(now.getTime() + ms);
  const kubelet = kubeletIdentity();
  const cluster = { server: 'https://127.0.0.1:6443', caPem: 'CA', tlsServerName: null };
  const usable = (notAfter: Date): NodeCredential => ({ identity: kubelet, state: 'usable', certPem: 'C', keyPem: 'K', notAfter, cluster });
  const unusable: Assessment = { identity: kubelet, state: 'unusable', reason: 'the link is missing', cluster: null };
  const why = 'rotateCertificates: true';
  const base = { kubeletProblem: null, deadline: null, force: false, now, renewedElsewhere: why };

  const valid = usable(at(3_600_000));
  t.match(
    nextAction({ ...base, own: valid, requester: valid, deadline: at(-1) }),
    { kind: 'step-aside', until: at(STEP_ASIDE_RECHECK_MS) },
    "valid, even past kubeboot's own deadline: no renewal, look again later",
  );
  t.match(
    nextAction({ ...base, own: valid, requester: valid, force: true }),
    { kind: 'step-aside' },
    'kubeboot renew does not override it',
  );
  const soon = usable(at(30_000));
  t.match(
    nextAction({ ...base, own: soon, requester: soon }),
    { kind: 'step-aside', until: soon.notAfter },
    'looks again at notAfter at the latest',
  );
  t.match(
    nextAction({ ...base, own: unusable, requester: valid }),
    { kind: 'step-aside', until: at(STEP_ASIDE_SETTLE_MS), why: /not usable right now \(the link is missing\)/ },
    'files briefly unusable (the kubelet removes its link before it renames the new one in) while a valid one is held: wait, do not renew',
  );
  t.match(
    nextAction({ ...base, own: unusable, requester: null }),
    { kind: 'bootstrap' },
    'nothing valid left anywhere: kubeboot re-bootstraps, which the kubelet cannot',
  );
  t.match(
    nextAction({ ...base, renewedElsewhere: null, own: valid, requester: valid, deadline: at(-1) }),
    { kind: 'renew' },
    'when kubeboot renews, a due certificate is renewed as before',
  );
});
