// The real kubelet and kube-proxy of the control plane's release, run on the
// credentials kubeboot wrote, without touching the host: the kubelet in
// private mount and network namespaces (plain files bind-mounted over the
// /proc/sys entries it writes, an overlay on /var), kube-proxy in the same
// network namespace (the node's), the container runtime an in-memory fake.
import { execFile } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stringify } from 'yaml';
import type { NodeNetwork } from './netns.js';
import { startComponent, stopComponent, waitReady, type Component } from './processes.js';

export interface NodeBinaries {
  dir: string;
  kubelet: string;
  kubeProxy: string;
  fakecri: string;
}

const buildScript = fileURLToPath(new URL('../controlplane/build.sh', import.meta.url));
let cached: Promise<NodeBinaries> | undefined;

/** build.sh --node once per process: the control plane plus kubelet, kube-proxy and fakecri. */
export function nodeBinaries(): Promise<NodeBinaries> {
  cached ??= new Promise<string>((resolve, reject) => {
    const child = execFile('bash', [buildScript, '--node'], { maxBuffer: 16 << 20 }, (err, out) => (err ? reject(err) : resolve(out)));
    child.stderr?.pipe(process.stderr);
  }).then((out) => {
    const dir = out.trim().split('\n').at(-1) ?? '';
    return { dir, kubelet: join(dir, 'kubelet'), kubeProxy: join(dir, 'kube-proxy'), fakecri: join(dir, 'fakecri') };
  });
  return cached;
}

/** The sysctls the kubelet sets (container_manager_linux.go setupKernelTunables); each gets a private file. */
export const KUBELET_SYSCTLS = [
  'vm/overcommit_memory',
  'vm/panic_on_oom',
  'kernel/panic',
  'kernel/panic_on_oops',
  'kernel/keys/root_maxkeys',
  'kernel/keys/root_maxbytes',
];

/**
 * Runs in a fresh mount namespace (unshare --mount, private propagation):
 * the files stand in for the sysctls, the overlay takes every write to /var,
 * then the program runs in the node's network namespace. nsenter --net, not
 * `ip netns exec`, which remounts /sys and hides the cgroup mounts.
 *
 * The kubelet's root directory is made a shared mount point here, as a
 * systemd host's /var/lib/kubelet already is. Otherwise the kubelet
 * bind-mounts it onto itself at start, racing its own pod-resources socket
 * into that directory: the socket's rename then crosses the new mount
 * (EXDEV) and the kubelet exits 1; that race failed a CI run.
 */
const CONTAIN = `set -eu
sysctls=$1 upper=$2 work=$3 netns=$4 kubeletroot=$5; shift 5
mount --bind "$kubeletroot" "$kubeletroot"
mount --make-shared "$kubeletroot"
for s in ${KUBELET_SYSCTLS.join(' ')}; do
  f="$sysctls/$(echo "$s" | tr / .)"
  cat "/proc/sys/$s" > "$f"
  mount --bind "$f" "/proc/sys/$s"
done
mount -t overlay overlay -o "lowerdir=/var,upperdir=$upper,workdir=$work" /var
exec nsenter --net="$netns" -- "$@"
`;

export interface RealNodeOptions {
  name: string;
  /** Short: unix socket paths are limited to 108 bytes. */
  dir: string;
  net: NodeNetwork;
  caFile: string;
  kubeletKubeconfig: string;
  kubeProxyKubeconfig: string;
  /** Serving certificate and key for the kubelet (one PEM file may hold both); default: the kubelet's self-signed one. */
  kubeletServing?: { certFile: string; keyFile: string };
  kubeletConfig?: Record<string, unknown>;
  /** The kubelet's --cert-dir; default a directory of its own (in production both it and kubeboot's default to /var/lib/kubelet/pki). */
  certDir?: string;
  /** Another kubelet binary (an older release, for version skew); default the plane's release. */
  kubeletBinary?: string;
  /** More kubelet flags, e.g. --bootstrap-kubeconfig for the kubelet's own TLS bootstrap. */
  kubeletArgs?: string[];
  /**
   * The container runtime, already started by startRuntime (a node's
   * containerd starts at boot, ordered after nothing kubeboot does); default:
   * started here, before the kubelet.
   */
  runtime?: Component;
}

/** Where startRealNode writes the kubelet's KubeletConfiguration; kubeboot's kubelet.configFile points here. */
export function kubeletConfigPath(dir: string): string {
  return join(dir, 'kubelet-config.yaml');
}

/**
 * What a test kubelet leaves alone: no QoS cgroups, no node-allocatable
 * enforcement, no iptables chains (nothing on the host to set up), and no
 * eviction or image GC, so a busy shared disk never evicts the test's pod.
 */
export const CONTAINED_KUBELET = {
  cgroupsPerQOS: false,
  enforceNodeAllocatable: [],
  cgroupDriver: 'cgroupfs',
  makeIPTablesUtilChains: false,
  failSwapOn: false,
  evictionHard: { 'memory.available': '0%', 'nodefs.available': '0%', 'imagefs.available': '0%' },
  imageGCHighThresholdPercent: 100,
};

/**
 * The kubelet's KubeletConfiguration, written before anything starts (as a
 * node image or config management has it in place before kubeboot runs).
 * Rewriting it with the same options gives the same file.
 */
export function writeKubeletConfig(o: RealNodeOptions): string {
  mkdirSync(join(o.dir, 'run'), { recursive: true, mode: 0o700 });
  const socket = join(o.dir, 'run', 'cri.sock');
  const file = kubeletConfigPath(o.dir);
  writeFileSync(
    file,
    stringify({
      apiVersion: 'kubelet.config.k8s.io/v1beta1',
      kind: 'KubeletConfiguration',
      containerRuntimeEndpoint: `unix://${socket}`,
      imageServiceEndpoint: `unix://${socket}`,
      address: o.net.nodeIp,
      port: 10250,
      readOnlyPort: 0,
      healthzBindAddress: '127.0.0.1',
      healthzPort: 10248,
      authentication: { anonymous: { enabled: false }, webhook: { enabled: true }, x509: { clientCAFile: o.caFile } },
      authorization: { mode: 'Webhook' },
      // kubeboot renews the client certificate; the kubelet only re-reads the files (client-go's reload).
      rotateCertificates: false,
      ...(o.kubeletServing ? { tlsCertFile: o.kubeletServing.certFile, tlsPrivateKeyFile: o.kubeletServing.keyFile } : {}),
      ...CONTAINED_KUBELET,
      ...o.kubeletConfig,
    }),
  );
  return file;
}

export interface RealNode {
  fakecri: Component;
  kubelet: Component;
  kubeProxy: Component | undefined;
  /** What the kubelet wrote to /var, captured by the overlay (paths relative to /var). */
  varWrites(): string[];
  /** The kubelet's view of the sysctls it sets (the files bind-mounted over /proc/sys), e.g. `kernel/panic` → `10`. */
  privateSysctls(): Record<string, string>;
  startKubeProxy(): Promise<Component>;
  /**
   * Stops the kubelet (SIGTERM, as systemd stops kubelet.service) and starts
   * it again, its configuration rewritten with `changes` if any (same flags,
   * log file, root dir and overlay); `kubelet` is the new process afterwards.
   * Running pods stay in the runtime.
   */
  restartKubelet(changes?: Pick<RealNodeOptions, 'kubeletServing' | 'kubeletConfig'>): Promise<Component>;
  stop(): Promise<void>;
}

function walk(dir: string, prefix = ''): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const rel = prefix ? `${prefix}/${e.name}` : e.name;
    out.push(rel);
    if (e.isDirectory()) out.push(...walk(join(dir, e.name), rel));
  }
  return out;
}

/**
 * Starts the container runtime (fakecri) of the node in `dir` and waits for
 * its socket, polled every 10 ms: a benchmark times what follows from here.
 */
export async function startRuntime(dir: string): Promise<Component> {
  const bin = await nodeBinaries();
  mkdirSync(join(dir, 'run'), { recursive: true, mode: 0o700 });
  const fakecri = startComponent(
    'fakecri',
    bin.fakecri,
    ['--socket', join(dir, 'run', 'cri.sock'), '--image-fs', dir],
    join(dir, 'fakecri.log'),
  );
  try {
    await waitReady(fakecri, 'fakecri socket', async () => readdirSync(join(dir, 'run')).includes('cri.sock'), 30_000, 10);
  } catch (err) {
    await stopComponent(fakecri);
    throw err;
  }
  return fakecri;
}

/** Starts fakecri (unless given) and the kubelet; kube-proxy comes with `startKubeProxy` once its credential exists. */
export async function startRealNode(o: RealNodeOptions): Promise<RealNode> {
  const bin = await nodeBinaries();
  const d = (sub: string) => {
    const p = join(o.dir, sub);
    mkdirSync(p, { recursive: true, mode: 0o700 });
    return p;
  };
  const components: Component[] = [];
  const stop = async () => {
    for (const c of [...components].reverse()) await stopComponent(c);
  };

  try {
    const fakecri = o.runtime ?? (await startRuntime(o.dir));
    components.push(fakecri);

    let options = o;
    const startKubelet = () => {
      const kubeletConfig = writeKubeletConfig(options);
      const kubelet = startComponent(
        'kubelet',
        'unshare',
        [
          '--mount',
          '--propagation',
          'private',
          '--',
          'sh',
          '-c',
          CONTAIN,
          'contain',
          d('sysctl'),
          d('var-upper'),
          d('var-work'),
          options.net.path,
          d('kubelet-root'),
          options.kubeletBinary ?? bin.kubelet,
          `--config=${kubeletConfig}`,
          `--kubeconfig=${options.kubeletKubeconfig}`,
          `--root-dir=${d('kubelet-root')}`,
          `--cert-dir=${options.certDir ?? d('kubelet-serving')}`,
          `--hostname-override=${options.name}`,
          `--node-ip=${options.net.nodeIp}`,
          '--v=2',
          ...(options.kubeletArgs ?? []),
        ],
        join(options.dir, 'kubelet.log'),
      );
      components.push(kubelet);
      return kubelet;
    };
    const kubelet = startKubelet();

    const node: RealNode = {
      fakecri,
      kubelet,
      kubeProxy: undefined,
      varWrites: () => walk(join(o.dir, 'var-upper')),
      privateSysctls: () =>
        Object.fromEntries(KUBELET_SYSCTLS.map((k) => [k, readFileSync(join(o.dir, 'sysctl', k.replaceAll('/', '.')), 'utf8').trim()])),
      async startKubeProxy() {
        const config = join(o.dir, 'kube-proxy-config.yaml');
        writeFileSync(
          config,
          stringify({
            apiVersion: 'kubeproxy.config.k8s.io/v1alpha1',
            kind: 'KubeProxyConfiguration',
            clientConnection: { kubeconfig: o.kubeProxyKubeconfig },
            hostnameOverride: o.name,
            mode: 'nftables',
            bindAddress: o.net.nodeIp,
            healthzBindAddress: `${o.net.nodeIp}:10256`,
            metricsBindAddress: '127.0.0.1:10249',
            // 0 leaves each kernel setting as it is; the conntrack limit is global to the host.
            conntrack: {
              maxPerCore: 0,
              min: 0,
              tcpEstablishedTimeout: '0s',
              tcpCloseWaitTimeout: '0s',
              udpTimeout: '0s',
              udpStreamTimeout: '0s',
            },
          }),
        );
        const proxy = startComponent(
          'kube-proxy',
          'nsenter',
          [`--net=${o.net.path}`, '--', bin.kubeProxy, `--config=${config}`, '--v=2'],
          join(o.dir, 'kube-proxy.log'),
        );
        components.push(proxy);
        node.kubeProxy = proxy;
        return proxy;
      },
      async restartKubelet(changes = {}) {
        await stopComponent(node.kubelet);
        components.splice(components.indexOf(node.kubelet), 1);
        options = { ...options, ...changes };
        node.kubelet = startKubelet();
        return node.kubelet;
      },
      stop,
    };
    return node;
  } catch (err) {
    await stop();
    throw err;
  }
}
