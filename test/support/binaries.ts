// Finds the control-plane binaries built by test/controlplane/build.sh,
// building them the first time (build.sh reuses what it already built).
import { execFile } from 'node:child_process';
import { accessSync, constants, existsSync, readdirSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface Binaries {
  dir: string;
  kubeApiserver: string;
  kubeControllerManager: string;
  /** kubeadm of the same release: a test makes a kubeadm cluster's side with its `init phase` commands. */
  kubeadm: string;
  etcd: string;
  /** The machine's kubectl, or one build.sh built when there is none. */
  kubectl: string | undefined;
}

const buildScript = fileURLToPath(new URL('../controlplane/build.sh', import.meta.url));

export function onPath(command: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    const candidate = join(dir || '.', command);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

function newestEtcd(dir: string): string {
  const wanted = process.env.KUBEBOOT_ETCD_VERSION?.replace(/^v/, '');
  const versions = readdirSync(dir)
    .map((f) => /^etcd-(\d+\.\d+\.\d+)$/.exec(f)?.[1])
    .filter((v): v is string => v !== undefined)
    .sort((a, b) => a.localeCompare(b, 'en', { numeric: true }));
  const version = wanted ?? versions.at(-1);
  if (!version || !versions.includes(version)) throw new Error(`no etcd${wanted ? ` ${wanted}` : ''} binary in ${dir}`);
  return join(dir, `etcd-${version}`);
}

async function build(): Promise<Binaries> {
  const stdout = await new Promise<string>((resolve, reject) => {
    // The build's progress goes to our stderr so a slow first run is visible.
    const child = execFile('bash', [buildScript], { maxBuffer: 16 << 20 }, (err, out) => (err ? reject(err) : resolve(out)));
    child.stderr?.pipe(process.stderr);
  });
  const dir = stdout.trim().split('\n').at(-1) ?? '';
  const inCache = join(dir, 'kubectl');
  return {
    dir,
    kubeApiserver: join(dir, 'kube-apiserver'),
    kubeControllerManager: join(dir, 'kube-controller-manager'),
    kubeadm: join(dir, 'kubeadm'),
    etcd: newestEtcd(dir),
    kubectl: existsSync(inCache) ? inCache : onPath('kubectl'),
  };
}

let cached: Promise<Binaries> | undefined;

/** Runs build.sh once per process; it answers at once when the binaries are already built. */
export function controlPlaneBinaries(): Promise<Binaries> {
  cached ??= build();
  return cached;
}
