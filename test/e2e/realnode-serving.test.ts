// The kubelet's serving certificate from kubeboot, the alternative to the
// kubelet's own serverTLSBootstrap (realnode-join): kubeboot's
// kubeletServing identity (DNS:<n>, IP:<node IP>) approved by `kubeboot
// approver --approve-kubelet-serving`, the real kubelet serving it from
// tlsCertFile/tlsPrivateKeyFile, and an API server started with
// --kubelet-certificate-authority reaching the kubelet through it.
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect, type PeerCertificate } from 'node:tls';
import t from 'tap';
import type { KubeObject } from '../support/admin.js';
import { kubeboot } from '../support/kubeboot.js';
import { snapshotHost } from '../support/netns.js';
import { auditEventsFrom, joinRealNode, realNodeOrSkip, waitForIdentity } from '../support/node-join.js';

const NAME = 'realnode-serving';
const SERVING_SIGNER = 'kubernetes.io/kubelet-serving';

/** The first certificate of a PEM file (kubeboot's `-current.pem` holds the certificate, then the key). */
function firstCertificate(file: string): X509Certificate {
  const pem = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/.exec(readFileSync(file, 'utf8'))?.[0];
  if (pem === undefined) throw new Error(`no certificate in ${file}`);
  return new X509Certificate(pem);
}

/** The leaf the server at host:10250 presents, its chain verified against `ca` for the name `servername`. */
function presented(host: string, ca: string, servername: string): Promise<PeerCertificate> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port: 10250, ca, servername }, () => {
      const cert = socket.getPeerCertificate();
      socket.destroy();
      resolve(cert);
    });
    socket.once('error', reject);
  });
}

if (await realNodeOrSkip(t)) {
  t.test("the kubelet serves kubeboot's serving certificate, approved by kubeboot approver, and files no serving CSR itself", async (t) => {
    const joined = await joinRealNode(t, NAME, { kubebootServing: true });
    const { plane, net, node, layout } = joined;
    const servingFile = join(layout.kubeletCertDir, 'kubelet-server-current.pem');
    const ca = readFileSync(plane.caFile, 'utf8');

    // First start: no serving file yet (a kubelet given a missing tlsCertFile
    // exits), so the kubelet runs on its self-signed default and registers
    // the Node, whose address lets the approver pass kubeboot's IP SAN.
    const csr = await plane.admin.waitFor(
      "kubeboot's serving CSR, issued",
      async () => {
        if (node.kubelet.exited !== undefined) throw new Error(`the kubelet exited (${node.kubelet.exited}); see ${node.kubelet.logFile}`);
        return (await plane.admin.listCsrs()).find(
          (c: KubeObject) => c.spec.signerName === SERVING_SIGNER && c.spec.username === `system:node:${NAME}` && c.status?.certificate,
        );
      },
      240_000,
    );
    t.match(
      csr.status.conditions.find((c: { type: string }) => c.type === 'Approved'),
      { reason: 'KubebootApprover' },
      "kubeboot's serving CSR was approved by kubeboot approver",
    );
    await waitForIdentity(t, layout, 'kubelet-serving');
    const issued = firstCertificate(servingFile);
    t.equal(
      issued.raw.toString('base64'),
      new X509Certificate(Buffer.from(csr.status.certificate, 'base64')).raw.toString('base64'),
      "kubeboot's file holds the certificate issued for that CSR",
    );
    t.same(
      issued.subjectAltName?.split(', ').sort(),
      [`DNS:${NAME}`, `IP Address:${net.nodeIp}`],
      'with the node name and the node IP as SANs',
    );
    t.ok(issued.checkIssued(new X509Certificate(ca)), 'signed by the cluster CA');

    // The kubelet as kubeboot expects it for this option: serverTLSBootstrap
    // false, both tlsCertFile and tlsPrivateKeyFile the `-current.pem` link.
    await node.restartKubelet({
      kubeletServing: { certFile: servingFile, keyFile: servingFile },
      kubeletConfig: { serverTLSBootstrap: false },
    });
    const kubeletHealthz = await plane.admin.waitFor(
      "the kubelet's /healthz through the apiserver",
      async () => {
        if (node.kubelet.exited !== undefined) throw new Error(`the kubelet exited (${node.kubelet.exited}); see ${node.kubelet.logFile}`);
        const res = await plane.admin.request('GET', `/api/v1/nodes/${NAME}/proxy/healthz`);
        return res.status === 200 ? res.body : undefined;
      },
      120_000,
    );
    t.equal(kubeletHealthz, 'ok', "GET /api/v1/nodes/<n>/proxy/healthz: the apiserver verified the kubelet's certificate");
    const served = await presented(net.nodeIp, ca, NAME);
    t.equal(served.raw.toString('base64'), issued.raw.toString('base64'), "the kubelet presents on :10250 exactly kubeboot's certificate");

    // Renewal: `kubeboot renew` asks the daemon, which files a new CSR; the
    // kubelet reloads its tlsCertFile (ReloadKubeletServerCertificateFile, on by default since 1.31).
    const renewed = await kubeboot(t, ['renew', '--config', layout.config, '--identity', 'kubelet-serving']);
    t.equal(renewed.code, 0, `kubeboot renew --identity kubelet-serving: ${renewed.stderr.trim()}`);
    const next = await plane.admin.waitFor(
      "kubeboot's renewed serving certificate in its file",
      async () => {
        const cert = firstCertificate(servingFile);
        return cert.serialNumber !== issued.serialNumber ? cert : undefined;
      },
      180_000,
    );
    const renewedAt = Date.now();
    const reloaded = await plane.admin.waitFor(
      'the kubelet to present the renewed certificate',
      async () => {
        if (node.kubelet.exited !== undefined) throw new Error(`the kubelet exited (${node.kubelet.exited}); see ${node.kubelet.logFile}`);
        const cert = await presented(net.nodeIp, ca, NAME);
        return cert.serialNumber === next.serialNumber ? cert : undefined;
      },
      180_000,
    );
    t.comment(`the kubelet presented the renewal ${Date.now() - renewedAt} ms after the test saw it in kubeboot's file`);
    t.equal(reloaded.raw.toString('base64'), next.raw.toString('base64'), 'the kubelet picked up the renewal without a restart');
    t.equal(node.kubelet.exited, undefined, 'the kubelet is still the same process');
    const afterRenewal = await plane.admin.request('GET', `/api/v1/nodes/${NAME}/proxy/healthz`);
    t.equal(afterRenewal.body, 'ok', '/healthz through the apiserver still answers on the renewed certificate');

    const servingCsrs = (await plane.admin.listCsrs()).filter((c: KubeObject) => c.spec.signerName === SERVING_SIGNER);
    t.same(
      servingCsrs.map((c: KubeObject) => new X509Certificate(Buffer.from(c.status?.certificate ?? '', 'base64')).serialNumber).sort(),
      [issued.serialNumber, next.serialNumber].sort(),
      "the only serving CSRs are kubeboot's two, each issued the certificate kubeboot stored",
    );
    t.same(
      auditEventsFrom(plane, net.nodeIp, 'kubelet/')
        .filter((e) => e.verb === 'create' && e.objectRef?.resource === 'certificatesigningrequests')
        .map((e) => e.requestURI),
      [],
      'the kubelet created no CSR',
    );

    const varWrites = node.varWrites();
    await joined.stop();
    const after = await snapshotHost();
    t.same(after.sysctls, joined.hostBefore.sysctls, 'the host sysctls are unchanged');
    t.equal(after.netfilter, joined.hostBefore.netfilter, "the host's netfilter ruleset is unchanged");
    t.same(after.varPaths, joined.hostBefore.varPaths, "no kubelet directory appeared in the host's /var");
    t.ok(varWrites.includes('lib/kubelet/device-plugins'), 'the kubelet wrote to /var, into the overlay');
  });
}
