// A real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager)
// on loopback for one test file: fresh PKI, random ports, the shipped RBAC
// manifests applied, kube-public/cluster-info published as kubeadm does, and
// `kubeboot approver --approve-kubelet-client` approving kubelet client CSRs.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import type { Test } from 'tap';
import { adminApi, waitFor, type AdminApi } from './admin.js';
import { controlPlaneBinaries, onPath } from './binaries.js';
import { apiserverArgs, controllerManagerArgs, etcdArgs, writePki, type PkiFiles } from './components.js';
import { expectStatus, kubeClient, type KubeClient } from './http.js';
import { clusterInfoKubeconfig, writeKubeconfig } from './kubeconfig.js';
import { startKubeletApprover } from './approver.js';
import type { Running } from './kubeboot.js';
import { applyManifests } from './manifests.js';
import { createClusterPki, issueLeaf } from './pki.js';
import { peakRssKiB, startComponent, startOnFreePorts, stopComponent, waitReady, type Component } from './processes.js';

export type { AdminApi, BootstrapToken } from './admin.js';

export interface StartOptions {
  /** kube-controller-manager --cluster-signing-duration; default 1h. */
  signingDuration?: string;
  /** Names the temp dir, to tell concurrent planes apart. */
  name?: string;
  /** Write every request's metadata to `<dir>/audit.log` (benchmarks count requests server-side; read it with `auditEvents`). */
  audit?: boolean;
  /** false: kube-controller-manager runs without its CSR signer, so approved CSRs stay unissued. */
  csrSigning?: boolean;
  /**
   * Serve on this address instead of 127.0.0.1, e.g. the host end of a veth
   * pair, so a node in its own network namespace can reach the apiserver.
   */
  address?: string;
  /** More kube-apiserver flags, e.g. a low --max-requests-inflight. */
  apiserverFlags?: string[];
  /**
   * false: apply none of packaging/manifests and publish no cluster-info (a
   * test makes the cluster side itself, e.g. with kubeadm); implies no
   * kubelet approver.
   */
  manifests?: boolean;
  /**
   * false: no `kubeboot approver --approve-kubelet-client` for the plane, so
   * kubelet client CSRs stay Pending unless the test approves them (the
   * shipped RBAC no longer lets kube-controller-manager auto-approve them).
   * A test that brings its own approver needs nothing here: installApprover
   * stops the plane's.
   */
  kubeletApprover?: boolean;
}

export interface ControlPlane {
  /** https://127.0.0.1:<port> */
  server: string;
  /** The cluster CA, which also signs every CSR. */
  caPem: string;
  caFile: string;
  caKeyPem: string;
  /** Admin kubeconfig (O=system:masters client cert, embedded data). */
  adminKubeconfig: string;
  /** Temp dir holding certs, kubeconfigs, etcd data and the component logs. */
  dir: string;
  /** gitVersion reported by the running apiserver's /version. */
  version: string;
  kubectlPath: string | undefined;
  admin: AdminApi;
  /** Component name → log file. */
  logs: Record<string, string>;
  /** The apiserver's audit log (JSON lines, level Metadata) when started with `audit`. */
  auditLog: string | undefined;
  /** Milliseconds from start to everything ready. */
  startupMs: number;
  writeBootstrapKubeconfig(file: string, token: string, opts?: { ca?: 'file' | 'data' | 'none'; server?: string }): Promise<void>;
  /** A client cert signed by the cluster CA (ECDSA P-256), e.g. expired or for another identity. */
  mintClientCert(opts: {
    commonName: string;
    organizations?: string[];
    notBefore?: Date;
    notAfter?: Date;
  }): Promise<{ certPem: string; keyPem: string }>;
  /** Peak resident set size (VmHWM, KiB) of each component so far. */
  peakRss(): Record<string, number | undefined>;
  /** Sends a signal to one component: SIGSTOP and SIGCONT pause and resume it (e.g. the signer, in kube-controller-manager). */
  signal(component: 'etcd' | 'kube-apiserver' | 'kube-controller-manager', signal: NodeJS.Signals): void;
  /** Process id of each component (benchmarks sample their CPU and memory). */
  pids(): Record<string, number>;
  /** The PKI files the components were started with (an admin rotating the CA writes new ones beside them). */
  files: PkiFiles;
  /** kube-controller-manager's kubeconfig (its CA and client certificate), rewritten by an admin rotating the CA. */
  controllerManagerKubeconfig: string;
  /**
   * Stops one component and starts it again on the same port with some flags
   * changed (`{ 'client-ca-file': path }`), as an admin restarts a static pod
   * after editing its manifest; resolves once it is ready again.
   */
  restart(component: 'kube-apiserver' | 'kube-controller-manager', flags: Record<string, string>): Promise<void>;
  /** The admin client trusts `caPem` and authenticates with this certificate from now on (the cluster's CA is being rotated). */
  useAdmin(o: { caPem: string; certPem?: string; keyPem?: string }): void;
  /** The plane's `kubeboot approver --approve-kubelet-client`, while it runs. */
  kubeletApprover: Running | undefined;
  /** Stops the plane's approver (SIGTERM: it releases the Lease), if it runs. */
  stopKubeletApprover(): Promise<void>;
  /** Stops all components; keeps the dir (and says where the logs are) when keep or KUBEBOOT_KEEP_CONTROLPLANE=1. */
  stop(opts?: { keep?: boolean }): Promise<void>;
}

// Generous: a loaded 2-core machine can take 30 s+ to get the apiserver ready.
const startTimeoutMs = 120_000;

export async function startControlPlane(opts: StartOptions = {}): Promise<ControlPlane> {
  const began = Date.now();
  const bin = await controlPlaneBinaries();
  const dir = mkdtempSync(join(tmpdir(), `kubeboot-cp-${opts.name ?? 'test'}-`));
  const components: Component[] = [];
  const clients: KubeClient[] = [];
  const logs: Record<string, string> = {};
  const start = (name: string, binary: string, args: string[]) => {
    logs[name] = join(dir, `${name}.log`);
    const c = startComponent(name, binary, args, logs[name]);
    components.push(c);
    return c;
  };
  const stopAll = async () => {
    // Reverse start order: the controller manager, then the apiserver, then etcd.
    for (const c of [...components].reverse()) await stopComponent(c);
    await Promise.all(clients.map((c) => c.close()));
  };
  const client = (o: Parameters<typeof kubeClient>[0]) => {
    const c = kubeClient(o);
    clients.push(c);
    return c;
  };

  try {
    const address = opts.address ?? '127.0.0.1';
    const pki = await createClusterPki(address === '127.0.0.1' ? [] : [address]);
    const files = await writePki(dir, pki);

    const etcdData = join(dir, 'etcd');
    const [etcdPort] = await startOnFreePorts(
      2,
      ([clientPort = 0, peerPort = 0]) => {
        // Fresh on every attempt: a member initialised with other peer URLs would not start.
        rmSync(etcdData, { recursive: true, force: true });
        mkdirSync(etcdData, { mode: 0o700 });
        return start('etcd', bin.etcd, etcdArgs(etcdData, clientPort, peerPort));
      },
      (c, [clientPort]) =>
        waitReady(
          c,
          'etcd /health',
          async () => {
            const res = await request(`http://127.0.0.1:${clientPort}/health`);
            return res.statusCode === 200 && ((await res.body.json()) as { health?: string }).health === 'true';
          },
          startTimeoutMs,
        ),
    );

    let server = '';
    let admin: KubeClient | undefined;
    let apiArgs: string[] = [];
    let kcmArgs: string[] = [];
    let kcmHealth: KubeClient | undefined;
    await startOnFreePorts(
      1,
      ([port = 0]) => {
        server = `https://${address}:${port}`;
        const etcdUrl = `http://127.0.0.1:${etcdPort}`;
        const audit = opts.audit ? { policy: join(dir, 'audit-policy.yaml'), log: join(dir, 'audit.log') } : undefined;
        if (audit)
          writeFileSync(
            audit.policy,
            'apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n',
          );
        apiArgs = apiserverArgs({
          etcdUrl,
          address,
          port,
          files,
          certDir: join(dir, 'apiserver-certs'),
          audit,
          extra: opts.apiserverFlags,
        });
        return start('kube-apiserver', bin.kubeApiserver, apiArgs);
      },
      async (c) => {
        const a = client({ server, caPem: pki.ca.certPem, certPem: pki.admin.certPem, keyPem: pki.admin.keyPem });
        admin = a;
        await waitReady(c, 'kube-apiserver /readyz', async () => (await a.request('GET', '/readyz')).status === 200, startTimeoutMs);
      },
    );
    if (!admin) throw new Error('unreachable: the apiserver is ready but there is no admin client');
    const a = admin;
    const exists = (path: string) => async () => ((await a.request('GET', path)).status === 200 ? true : undefined);
    // /readyz can precede the system namespaces; kube-public must exist for cluster-info.
    await waitFor('the default namespace', exists('/api/v1/namespaces/default'), startTimeoutMs);
    await waitFor('the kube-public namespace', exists('/api/v1/namespaces/kube-public'), startTimeoutMs);

    const withManifests = opts.manifests ?? true;
    if (withManifests) {
      await applyManifests(a);
      // As kubeadm publishes it; bootstrapsigner adds a jws-kubeconfig-<id> key per signing token.
      const clusterInfo = {
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: { name: 'cluster-info', namespace: 'kube-public' },
        data: { kubeconfig: clusterInfoKubeconfig(server, pki.ca.certPem) },
      };
      expectStatus(await a.request('POST', '/api/v1/namespaces/kube-public/configmaps', clusterInfo), 'create cluster-info', 201);
    }

    const adminKubeconfig = join(dir, 'admin.kubeconfig');
    await writeKubeconfig(adminKubeconfig, server, { pem: pki.ca.certPem }, pki.admin, 'kubeboot-admin');
    const kcmKubeconfig = join(dir, 'controller-manager.kubeconfig');
    await writeKubeconfig(kcmKubeconfig, server, { pem: pki.ca.certPem }, pki.controllerManagerClient, 'system:kube-controller-manager');

    await startOnFreePorts(
      1,
      ([port = 0]) => {
        kcmArgs = controllerManagerArgs({
          kubeconfig: kcmKubeconfig,
          port,
          files,
          certDir: join(dir, 'controller-manager-certs'),
          signingDuration: opts.signingDuration ?? '1h',
          csrSigning: opts.csrSigning ?? true,
        });
        return start('kube-controller-manager', bin.kubeControllerManager, kcmArgs);
      },
      async (c, [port]) => {
        const health = client({ server: `https://127.0.0.1:${port}`, caPem: pki.ca.certPem });
        kcmHealth = health;
        await waitReady(
          c,
          'kube-controller-manager /healthz',
          async () => (await health.request('GET', '/healthz')).status === 200,
          startTimeoutMs,
        );
      },
    );

    let current: KubeClient = a;
    let adminCaPem = pki.ca.certPem;
    let adminCert = { certPem: pki.admin.certPem, keyPem: pki.admin.keyPem };
    const adminProxy: KubeClient = { request: (m, p, b) => current.request(m, p, b), close: async () => {} };
    const version = expectStatus(await a.request<{ gitVersion: string }>('GET', '/version'), 'GET /version', 200).body.gitVersion;
    let stopped = false;
    let approver: Running | undefined;
    const stopKubeletApprover = async () => {
      const running = approver;
      approver = undefined;
      if (!running) return;
      if (running.child.exitCode === null && running.child.signalCode === null) running.child.kill('SIGTERM');
      await running.done;
      // Kept with the components' logs when a test fails.
      writeFileSync(join(dir, 'kubelet-approver.log'), running.output());
    };
    const plane: ControlPlane = {
      server,
      caPem: pki.ca.certPem,
      caFile: files.ca,
      caKeyPem: pki.ca.keyPem,
      adminKubeconfig,
      dir,
      version,
      kubectlPath: bin.kubectl,
      admin: adminApi(adminProxy, (token) => kubeClient({ server, caPem: adminCaPem, token })),
      files,
      controllerManagerKubeconfig: kcmKubeconfig,

      async restart(name, flags) {
        const index = components.findIndex((c) => c.name === name);
        const old = components[index];
        if (!old) throw new Error(`${name} is not running`);
        await stopComponent(old);
        const base = name === 'kube-apiserver' ? apiArgs : kcmArgs;
        const args = withFlags(base, flags);
        if (name === 'kube-apiserver') apiArgs = args;
        else kcmArgs = args;
        logs[name] = logs[name] ?? join(dir, `${name}.log`);
        const c = startComponent(name, name === 'kube-apiserver' ? bin.kubeApiserver : bin.kubeControllerManager, args, logs[name]);
        components[index] = c;
        if (name === 'kube-apiserver')
          await waitReady(
            c,
            'kube-apiserver /readyz',
            async () => (await adminProxy.request('GET', '/readyz')).status === 200,
            startTimeoutMs,
          );
        else
          await waitReady(
            c,
            'kube-controller-manager /healthz',
            async () => (await kcmHealth!.request('GET', '/healthz')).status === 200,
            startTimeoutMs,
          );
      },

      useAdmin(o) {
        adminCaPem = o.caPem;
        current = client({ server, caPem: o.caPem, certPem: o.certPem ?? adminCert.certPem, keyPem: o.keyPem ?? adminCert.keyPem });
        if (o.certPem && o.keyPem) adminCert = { certPem: o.certPem, keyPem: o.keyPem };
      },
      logs,
      auditLog: opts.audit ? join(dir, 'audit.log') : undefined,
      startupMs: Date.now() - began,

      async writeBootstrapKubeconfig(file, token, o = {}) {
        const ca = o.ca ?? 'file';
        const source = ca === 'file' ? { file: files.ca } : ca === 'data' ? { pem: pki.ca.certPem } : ('none' as const);
        await writeKubeconfig(file, o.server ?? server, source, { token }, 'tls-bootstrap-token-user');
      },

      async mintClientCert(o) {
        const leaf = await issueLeaf(pki.ca, { ...o, usage: 'client' });
        return { certPem: leaf.certPem, keyPem: leaf.keyPem };
      },

      peakRss: () => Object.fromEntries(components.map((c) => [c.name, peakRssKiB(c)])),
      pids: () => Object.fromEntries(components.map((c) => [c.name, c.pid])),

      signal(name, sig) {
        const c = components.find((x) => x.name === name);
        if (!c || c.exited !== undefined) throw new Error(`${name} is not running`);
        c.child.kill(sig);
      },

      get kubeletApprover() {
        return approver;
      },
      stopKubeletApprover,

      async stop(o = {}) {
        if (stopped) return;
        stopped = true;
        await stopKubeletApprover();
        // A paused component would never see the SIGTERM.
        for (const c of components) if (c.exited === undefined) c.child.kill('SIGCONT');
        await stopAll();
        if (o.keep || process.env.KUBEBOOT_KEEP_CONTROLPLANE === '1') {
          const list = Object.values(logs)
            .map((l) => `    ${l}`)
            .join('\n');
          process.stderr.write(`\n*** control plane kept in ${dir}; component logs:\n${list}\n`);
        } else {
          rmSync(dir, { recursive: true, force: true });
        }
      },
    };
    if (withManifests && (opts.kubeletApprover ?? true)) {
      const approverDir = join(dir, 'kubelet-approver');
      mkdirSync(approverDir);
      approver = await startKubeletApprover(plane, approverDir);
      logs['kubeboot-approver'] = join(dir, 'kubelet-approver.log');
    }
    return plane;
  } catch (err) {
    await stopAll();
    process.stderr.write(`\n*** control plane failed to start; kept ${dir} (logs: ${Object.values(logs).join(', ')})\n`);
    throw err;
  }
}

/** `args` with each `--name=value` of `flags` replacing the flag of that name, or appended. */
function withFlags(args: string[], flags: Record<string, string>): string[] {
  const out = args.filter((arg) => !Object.keys(flags).some((name) => arg.startsWith(`--${name}=`)));
  return [...out, ...Object.entries(flags).map(([name, value]) => `--${name}=${value}`)];
}

/** Starts a plane for this test and stops it when the test ends, keeping its logs if the test failed. */
export async function withControlPlane(t: Test, opts?: StartOptions): Promise<ControlPlane> {
  const plane = await startControlPlane(opts);
  t.teardown(() => plane.stop({ keep: !t.passing() }));
  return plane;
}

/**
 * withControlPlane, or a loud skip when the binaries cannot exist here (no Go
 * toolchain and nothing built). Under CI=true that is a failure instead: CI
 * must prove the product against a real cluster.
 */
export async function controlPlaneOrSkip(t: Test, opts?: StartOptions): Promise<ControlPlane | undefined> {
  try {
    await controlPlaneBinaries();
  } catch (err) {
    if (onPath('go') || process.env.CI === 'true') throw err;
    const reason =
      'SKIPPED: no Go toolchain on PATH and no control-plane binaries built (run test/controlplane/build.sh); the real-cluster tests did NOT run';
    process.stderr.write(`\n${'!'.repeat(100)}\n!!! ${reason}\n${'!'.repeat(100)}\n\n`);
    t.plan(0, reason);
    return undefined;
  }
  return withControlPlane(t, opts);
}
