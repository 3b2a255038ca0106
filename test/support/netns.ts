// A node's own network for tests that run the real kubelet and kube-proxy:
// a network namespace joined to the host by a veth pair, and a snapshot of
// what those programs could change on the host (sysctls, netfilter, /var),
// to prove that they did not.
import { execFile } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { onPath } from './binaries.js';

const run = promisify(execFile);

export interface NodeNetwork {
  /** `ip netns` name; the namespace is bind-mounted at `path`. */
  name: string;
  path: string;
  /** Host end of the veth pair (the apiserver listens here). */
  hostIp: string;
  /** The node's address, inside the namespace. */
  nodeIp: string;
  hostIf: string;
  remove(): Promise<void>;
}

async function ip(...args: string[]): Promise<string> {
  return (await run('ip', args)).stdout;
}

/** IPv4 prefixes the host already routes or holds, as [network, bits]. */
async function hostPrefixes(): Promise<[number, number][]> {
  const routes = JSON.parse(await ip('-4', '-j', 'route', 'show', 'table', 'all')) as { dst: string }[];
  const addrs = JSON.parse(await ip('-4', '-j', 'addr')) as { addr_info: { local: string; prefixlen: number }[] }[];
  const out: [number, number][] = [];
  for (const r of routes) {
    if (r.dst === 'default') continue;
    const [net, bits = '32'] = r.dst.split('/');
    if (net && /^\d+\.\d+\.\d+\.\d+$/.test(net)) out.push([toInt(net), Number(bits)]);
  }
  for (const a of addrs.flatMap((x) => x.addr_info)) out.push([toInt(a.local), a.prefixlen]);
  return out;
}

const toInt = (a: string) => a.split('.').reduce((n, o) => n * 256 + Number(o), 0);
const toIp = (n: number) => [24, 16, 8, 0].map((s) => Math.floor(n / 2 ** s) % 256).join('.');
const overlaps = (a: number, abits: number, b: number, bbits: number) => {
  const bits = Math.min(abits, bbits);
  const size = 2 ** (32 - bits);
  return Math.floor(a / size) === Math.floor(b / size);
};

/**
 * A fresh namespace `kbn-<random>` with a /30 from 10.213.0.0/16 that
 * overlaps nothing on the host: `hostIp` on the host end, `nodeIp` inside,
 * a default route back through the host end. Nothing is forwarded further:
 * the host's ip_forward is left as it is.
 */
export async function createNodeNetwork(): Promise<NodeNetwork> {
  const taken = await hostPrefixes();
  let base = 0;
  for (let i = 0; i < 50 && base === 0; i++) {
    const candidate = toInt('10.213.0.0') + randomInt(16384) * 4;
    if (!taken.some(([n, bits]) => overlaps(candidate, 30, n, bits))) base = candidate;
  }
  if (base === 0) throw new Error('no free /30 in 10.213.0.0/16 for a node network');
  const id = randomBytes(3).toString('hex');
  const name = `kbn-${id}`;
  const hostIf = `kbh${id}`;
  const nodeIf = `kbn${id}`;
  const hostIp = toIp(base + 1);
  const nodeIp = toIp(base + 2);
  await ip('netns', 'add', name);
  const remove = async () => {
    await ip('link', 'del', hostIf).catch(() => undefined);
    await ip('netns', 'del', name).catch(() => undefined);
  };
  try {
    await ip('link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nodeIf);
    await ip('link', 'set', nodeIf, 'netns', name);
    await ip('addr', 'add', `${hostIp}/30`, 'dev', hostIf);
    await ip('link', 'set', hostIf, 'up');
    await ip('-n', name, 'link', 'set', 'lo', 'up');
    await ip('-n', name, 'addr', 'add', `${nodeIp}/30`, 'dev', nodeIf);
    await ip('-n', name, 'link', 'set', nodeIf, 'up');
    await ip('-n', name, 'route', 'add', 'default', 'via', hostIp);
  } catch (err) {
    await remove();
    throw err;
  }
  return { name, path: `/run/netns/${name}`, hostIp, nodeIp, hostIf, remove };
}

/**
 * What the kubelet writes outside its --root-dir (container_manager_linux.go
 * setupKernelTunables), and what kube-proxy could (conntrack limits and
 * timeouts, route_localnet, forwarding).
 */
export const WATCHED_SYSCTLS = [
  'vm/overcommit_memory',
  'vm/panic_on_oom',
  'kernel/panic',
  'kernel/panic_on_oops',
  'kernel/keys/root_maxkeys',
  'kernel/keys/root_maxbytes',
  'net/netfilter/nf_conntrack_max',
  'net/netfilter/nf_conntrack_tcp_timeout_established',
  'net/netfilter/nf_conntrack_tcp_timeout_close_wait',
  'net/netfilter/nf_conntrack_udp_timeout',
  'net/netfilter/nf_conntrack_udp_timeout_stream',
  'net/ipv4/conf/all/route_localnet',
  'net/ipv4/ip_forward',
  'net/bridge/bridge-nf-call-iptables',
];

/** The /var paths the kubelet and kube-proxy create whatever their flags say. */
export const WATCHED_VAR_PATHS = [
  '/var/lib/kubelet',
  '/var/log/containers',
  '/var/log/pods',
  '/var/lib/kube-proxy',
  '/var/lib/cni',
  '/run/kubernetes',
];

export interface HostSnapshot {
  sysctls: Record<string, string>;
  /** `nft list ruleset` (iptables-nft rules included) and iptables-legacy's tables. */
  netfilter: string;
  varPaths: Record<string, boolean>;
}

export async function snapshotHost(): Promise<HostSnapshot> {
  const sysctls: Record<string, string> = {};
  for (const s of WATCHED_SYSCTLS) {
    const file = `/proc/sys/${s}`;
    sysctls[s] = existsSync(file) ? readFileSync(file, 'utf8').trim() : '(absent)';
  }
  let netfilter = (await run('nft', ['list', 'ruleset'], { maxBuffer: 16 << 20 })).stdout;
  if (onPath('iptables-legacy-save'))
    netfilter += (await run('iptables-legacy-save', [], { maxBuffer: 16 << 20 })).stdout.replace(/^#.*\n/gm, '');
  const varPaths = Object.fromEntries(WATCHED_VAR_PATHS.map((p) => [p, existsSync(p)]));
  return { sysctls, netfilter, varPaths };
}
