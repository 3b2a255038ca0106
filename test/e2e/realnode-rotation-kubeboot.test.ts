// Coexistence with the kubelet's own rotation, rotateCertificates: false (what
// kubeboot expects): kubeboot alone renews the kubelet's client certificate,
// the real kubelet never asks for one and re-reads kubeboot's files (client-go
// reloads a file certificate; it notices a change on an open connection
// within 5 minutes). One renewal per period, by kubeboot; the -current.pem
// link always points at this node's certificate and key in kubeboot's
// directory, shared with the kubelet's --cert-dir as both programs'
// defaults have it; the kubelet only ever uses certificates that were on the
// link. Certificates of 7 minutes (notBefore backdated 5): kubeboot renews
// each after 1 minute.
//
// Cost: about 6–7 minutes of wall time, nearly all of it waiting for the
// kubelet's 5-minute reload.
import t from 'tap';
import { kubeboot } from '../support/kubeboot.js';
import { auditEventsFrom, joinRealNode, realNodeOrSkip, requestSpans } from '../support/node-join.js';
import {
  csrCreatorsAs,
  csrsMatchingLink,
  kubeletCredentialIds,
  waitKubeletUsesRenewal,
  waitNodeReady,
  watchKubeletLink,
} from '../support/rotation.js';

const NAME = 'rot-kubeboot';
t.setTimeout(40 * 60_000);

if (await realNodeOrSkip(t)) {
  t.test(
    'with rotateCertificates: false kubeboot alone renews the kubelet client certificate, and the kubelet uses its renewals',
    async (t) => {
      const joined = await joinRealNode(t, NAME, {
        plane: { signingDuration: '7m' },
        kubeboot: { kubeProxy: { enabled: false } },
        kubeletConfig: { rotateCertificates: false },
        sharedCertDir: true,
      });
      const { plane, net, node, layout, daemon } = joined;
      const link = watchKubeletLink(layout.kubeletCertDir, NAME);
      t.teardown(() => link.stop());
      await daemon.waitForOutput(/kubeboot renews the kubelet client certificate \(.*does not set rotateCertificates: true\)/, 120_000);
      t.pass('kubeboot read the kubelet configuration file and renews');
      await waitNodeReady(plane, NAME, [node.kubelet, node.fakecri]);

      const switched = await waitKubeletUsesRenewal(joined, link, 'the kubelet to use a certificate kubeboot renewed');
      t.comment(`the kubelet moved to a renewed certificate, on the link since ${new Date(switched.seenAt).toISOString()}`);

      const { csrs, seen } = await csrsMatchingLink(plane, link, NAME);
      const renewals = csrs.filter((c) => c.username === `system:node:${NAME}`);
      t.equal(csrs.filter((c) => c.username.startsWith('system:bootstrap:')).length, 1, 'one bootstrap CSR');
      t.same(
        renewals.filter((c) => c.by !== 'kubeboot').map((c) => c.name),
        [],
        "no CSR of the kubelet's own certificate manager (csr-…): it does not rotate",
      );
      t.ok(renewals.length >= 1, `kubeboot renewed ${renewals.length} times`);
      t.same(
        [...new Set(csrCreatorsAs(plane, `system:node:${NAME}`))],
        ['kubeboot'],
        'the audit log agrees: every CSR created as the node came from kubeboot',
      );
      t.equal(
        renewals.filter((c) => c.certId !== undefined).length,
        seen.length - 1,
        'one CSR per renewal: each issued one is on the link, none wasted',
      );
      for (const [i, s] of seen.slice(1).entries()) {
        const previous = seen[i]!;
        t.ok(
          s.seenAt < previous.notAfter,
          `certificate ${i + 2} was on the link before certificate ${i + 1} expired: renewed once per period, in time`,
        );
      }
      t.same(
        link.problems,
        [],
        `the link never dangled, never left the directory, never pointed at anything but this node's certificate and key (${link.looks} looks)`,
      );
      t.equal(link.absences, 0, 'and was never absent: kubeboot renames the new link over the old one');
      const used = kubeletCredentialIds(joined);
      t.same(
        [...used].filter((id) => !link.seen.some((s) => s.id === id)),
        [],
        'the kubelet authenticated only with certificates that were on the link: nothing foreign',
      );
      const requests = requestSpans(auditEventsFrom(plane, net.nodeIp, 'kubelet/'));
      t.same(
        requests
          .filter((r) => r.event.responseStatus?.code === 401)
          .map((r) => `${r.event.requestReceivedTimestamp} ${r.event.verb} ${r.event.requestURI}`),
        [],
        `no request of the kubelet was answered 401 (${requests.length} requests)`,
      );
      const status = await kubeboot(t, ['status', '--config', layout.config, '--output', 'json']);
      t.equal(JSON.parse(status.stdout).identities[0].renewedBy?.by, 'kubeboot', 'kubeboot status says who renews: kubeboot');
      await joined.stop();
    },
  );
}
