// Coexistence with the kubelet's own rotation, rotateCertificates: true: the
// real kubelet renews its client certificate itself (client-go's certificate
// manager, into its --cert-dir, here kubeboot's directory as both programs'
// defaults have it), and kubeboot, reading that setting from the kubelet's
// configuration file, steps aside for that identity: one renewal per period,
// by the kubelet; the -current.pem link always points at this node's
// certificate and key, in that directory; the kubelet works on its renewed
// certificate. Certificates of 7 minutes (notBefore backdated 5): kubeboot
// would renew one after 1 minute, the kubelet renews after 3.4–5.8.
//
// Cost: about 6 minutes of wall time, nearly all of it waiting.
import t from 'tap';
import { kubeboot } from '../support/kubeboot.js';
import { auditEventsFrom, credentialId, joinRealNode, realNodeOrSkip, requestSpans } from '../support/node-join.js';
import { csrCreatorsAs, csrsMatchingLink, waitNodeReady, watchKubeletLink } from '../support/rotation.js';

const NAME = 'rot-kubelet';
t.setTimeout(40 * 60_000);

if (await realNodeOrSkip(t)) {
  t.test('with rotateCertificates: true the kubelet alone renews its client certificate, and kubeboot steps aside', async (t) => {
    const joined = await joinRealNode(t, NAME, {
      plane: { signingDuration: '7m' },
      kubeboot: { kubeProxy: { enabled: false } },
      kubeletConfig: { rotateCertificates: true },
      sharedCertDir: true,
    });
    const { plane, net, node, layout, daemon } = joined;
    const link = watchKubeletLink(layout.kubeletCertDir, NAME);
    t.teardown(() => link.stop());
    await daemon.waitForOutput(/rotateCertificates: true: the kubelet renews its client certificate itself/, 120_000);
    t.pass('kubeboot read rotateCertificates: true from the kubelet configuration file and says it steps aside');
    await waitNodeReady(plane, NAME, [node.kubelet, node.fakecri]);

    // Until the kubelet has renewed once, and 90 s more: kubeboot's own deadline for the new certificate would be 1 minute after it.
    const renewed = await plane.admin.waitFor(
      'the kubelet to renew its client certificate',
      async () => {
        const gone = [node.kubelet, node.fakecri].find((c) => c.exited !== undefined);
        if (gone) throw new Error(`${gone.name} exited (${gone.exited}); see ${gone.logFile}`);
        link.look();
        const second = link.seen[1];
        return second && Date.now() > second.seenAt + 90_000 ? second : undefined;
      },
      14 * 60_000,
    );
    const first = link.seen[0]!;
    t.comment(
      `bootstrap certificate ${new Date(first.notBefore).toISOString()}–${new Date(first.notAfter).toISOString()}; the kubelet's renewal on the link at ${new Date(renewed.seenAt).toISOString()}`,
    );

    // Every issued kubelet CSR's certificate is the one the link then shows (the kubelet links it right after it is issued).
    const { csrs, seen } = await csrsMatchingLink(plane, link, NAME);
    const renewals = csrs.filter((c) => c.username === `system:node:${NAME}`);
    const bootstrap = csrs.filter((c) => c.username.startsWith('system:bootstrap:'));
    t.equal(bootstrap.length, 1, 'one bootstrap CSR (kubeboot, with the bootstrap token)');
    t.same(
      renewals.filter((c) => c.by !== 'kubelet').map((c) => c.name),
      [],
      'no renewal CSR by kubeboot (node-csr-…): it stepped aside',
    );
    t.ok(renewals.length >= 1, `the kubelet renewed: ${renewals.map((c) => c.name).join(', ')}`);
    t.same(
      [...new Set(csrCreatorsAs(plane, `system:node:${NAME}`))],
      ['kubelet'],
      "the audit log agrees: every CSR created as the node came from the kubelet's user agent",
    );
    t.equal(
      renewals.filter((c) => c.certId !== undefined).length,
      seen.length - 1,
      'one CSR per renewal: each issued one is on the link, none wasted',
    );
    t.same(
      link.problems,
      [],
      `the link never dangled, never left the directory, never pointed at anything but this node's certificate and key (${link.looks} looks)`,
    );
    t.ok(
      seen.slice(1).every((s) => renewals.some((c) => c.certId === s.id)),
      'every certificate after the bootstrap one is one the kubelet requested: nothing foreign',
    );
    t.comment(
      `the link was absent at ${link.absences} of ${link.looks} looks: client-go removes it just before renaming the new one in (certificate_store.go updateSymlink)`,
    );

    const requests = requestSpans(auditEventsFrom(plane, net.nodeIp, 'kubelet/'));
    t.ok(
      requests.some((r) => credentialId(r.event) === renewed.id),
      'the kubelet authenticates with the certificate it renewed',
    );
    t.same(
      requests
        .filter((r) => r.event.responseStatus?.code === 401)
        .map((r) => `${r.event.requestReceivedTimestamp} ${r.event.verb} ${r.event.requestURI}`),
      [],
      `no request of the kubelet was answered 401 (${requests.length} requests)`,
    );
    t.notMatch(
      daemon.output(),
      /kubelet: renewal due|kubelet: certificate valid until \S+; renewal scheduled/,
      'kubeboot never scheduled a kubelet renewal',
    );
    const status = await kubeboot(t, ['status', '--config', layout.config, '--output', 'json']);
    t.equal(JSON.parse(status.stdout).identities[0].renewedBy?.by, 'kubelet', 'kubeboot status says who renews: the kubelet');
    await joined.stop();
  });
}
