// The files and command lines the three components start with: what a
// kubeadm control plane would run, reduced to loopback, random ports and a
// temp dir (nothing under /var/run or /etc).
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ClusterPki } from './pki.js';

export interface PkiFiles {
  ca: string;
  caKey: string;
  apiserverCert: string;
  apiserverKey: string;
  controllerManagerCert: string;
  controllerManagerKey: string;
  apiserverKubeletClientCert: string;
  apiserverKubeletClientKey: string;
  serviceAccountKey: string;
  serviceAccountPub: string;
}

/** Private keys are written 0600, as kubeadm does. */
export async function writePki(dir: string, pki: ClusterPki): Promise<PkiFiles> {
  const files: PkiFiles = {
    ca: join(dir, 'ca.crt'),
    caKey: join(dir, 'ca.key'),
    apiserverCert: join(dir, 'apiserver.crt'),
    apiserverKey: join(dir, 'apiserver.key'),
    controllerManagerCert: join(dir, 'controller-manager-serving.crt'),
    controllerManagerKey: join(dir, 'controller-manager-serving.key'),
    apiserverKubeletClientCert: join(dir, 'apiserver-kubelet-client.crt'),
    apiserverKubeletClientKey: join(dir, 'apiserver-kubelet-client.key'),
    serviceAccountKey: join(dir, 'sa.key'),
    serviceAccountPub: join(dir, 'sa.pub'),
  };
  const secret = { mode: 0o600 };
  await writeFile(files.ca, pki.ca.certPem);
  await writeFile(files.caKey, pki.ca.keyPem, secret);
  await writeFile(files.apiserverCert, pki.apiserverServing.certPem);
  await writeFile(files.apiserverKey, pki.apiserverServing.keyPem, secret);
  await writeFile(files.controllerManagerCert, pki.controllerManagerServing.certPem);
  await writeFile(files.controllerManagerKey, pki.controllerManagerServing.keyPem, secret);
  await writeFile(files.apiserverKubeletClientCert, pki.apiserverKubeletClient.certPem);
  await writeFile(files.apiserverKubeletClientKey, pki.apiserverKubeletClient.keyPem, secret);
  await writeFile(files.serviceAccountKey, pki.serviceAccount.keyPem, secret);
  await writeFile(files.serviceAccountPub, pki.serviceAccount.publicKeyPem);
  return files;
}

/** One member, client and peer on loopback; no fsync, the data is thrown away. */
export function etcdArgs(dataDir: string, clientPort: number, peerPort: number): string[] {
  const client = `http://127.0.0.1:${clientPort}`;
  const peer = `http://127.0.0.1:${peerPort}`;
  return [
    '--name=test',
    `--data-dir=${dataDir}`,
    `--listen-client-urls=${client}`,
    `--advertise-client-urls=${client}`,
    `--listen-peer-urls=${peer}`,
    `--initial-advertise-peer-urls=${peer}`,
    `--initial-cluster=test=${peer}`,
    '--unsafe-no-fsync',
  ];
}

export function apiserverArgs(o: {
  etcdUrl: string;
  address: string;
  port: number;
  files: PkiFiles;
  certDir: string;
  audit?: { policy: string; log: string };
  extra?: string[];
}): string[] {
  return [
    ...(o.audit
      ? [`--audit-policy-file=${o.audit.policy}`, `--audit-log-path=${o.audit.log}`, '--audit-log-format=json', '--audit-log-mode=blocking']
      : []),
    ...(o.extra ?? []),
    `--etcd-servers=${o.etcdUrl}`,
    `--bind-address=${o.address}`,
    `--secure-port=${o.port}`,
    // The endpoint reconcilers reject a loopback advertise address; this cluster needs no endpoints.
    `--advertise-address=${o.address}`,
    '--endpoint-reconciler-type=none',
    // As kubeadm: kubelets are reached by their InternalIP, over TLS verified
    // against the cluster CA, with a client certificate of the apiserver's own.
    '--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname',
    `--kubelet-certificate-authority=${o.files.ca}`,
    `--kubelet-client-certificate=${o.files.apiserverKubeletClientCert}`,
    `--kubelet-client-key=${o.files.apiserverKubeletClientKey}`,
    `--tls-cert-file=${o.files.apiserverCert}`,
    `--tls-private-key-file=${o.files.apiserverKey}`,
    `--client-ca-file=${o.files.ca}`,
    // Otherwise it writes self-signed certs under /var/run/kubernetes.
    `--cert-dir=${o.certDir}`,
    '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
    `--service-account-key-file=${o.files.serviceAccountPub}`,
    `--service-account-signing-key-file=${o.files.serviceAccountKey}`,
    '--service-cluster-ip-range=10.96.0.0/16',
    '--enable-bootstrap-token-auth',
    '--authorization-mode=Node,RBAC',
    // As kubeadm: a node may modify only its own Node object.
    '--enable-admission-plugins=NodeRestriction',
    '--profiling=false',
    '--v=2',
  ];
}

export function controllerManagerArgs(o: {
  kubeconfig: string;
  port: number;
  files: PkiFiles;
  certDir: string;
  signingDuration: string;
  /** false: no csrsigning controller, so approved CSRs stay unissued (tests of "approved, not yet issued"). */
  csrSigning?: boolean;
}): string[] {
  return [
    `--kubeconfig=${o.kubeconfig}`,
    `--authentication-kubeconfig=${o.kubeconfig}`,
    `--authorization-kubeconfig=${o.kubeconfig}`,
    '--leader-elect=false',
    // bootstrapsigner and tokencleaner are off by default; kubeadm turns them on.
    `--controllers=csrapproving,${o.csrSigning === false ? '' : 'csrsigning,'}csrcleaner,bootstrapsigner,tokencleaner`,
    // As kubeadm: the cluster CA signs CSRs.
    `--cluster-signing-cert-file=${o.files.ca}`,
    `--cluster-signing-key-file=${o.files.caKey}`,
    `--cluster-signing-duration=${o.signingDuration}`,
    // Each controller acts as its own service account, so missing RBAC shows up here as in production.
    '--use-service-account-credentials',
    `--service-account-private-key-file=${o.files.serviceAccountKey}`,
    `--root-ca-file=${o.files.ca}`,
    '--bind-address=127.0.0.1',
    `--secure-port=${o.port}`,
    // Our own serving cert, so the health probe verifies TLS like any other client.
    `--tls-cert-file=${o.files.controllerManagerCert}`,
    `--tls-private-key-file=${o.files.controllerManagerKey}`,
    `--cert-dir=${o.certDir}`,
    '--profiling=false',
    '--v=2',
  ];
}
