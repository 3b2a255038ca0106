// Writes an OCI image layout (image-spec v1.1: oci-layout, index.json,
// blobs/sha256/) from the trees packaging/image/build.sh staged, and the same
// layout as an oci-archive. Reproducible by construction: tar entries sorted,
// owned by 0:0, every mtime SOURCE_DATE_EPOCH, no atime/ctime in the pax
// headers; gzip without name or time; JSON written in a fixed key order.
//
//   index.json → image index (amd64, arm64) → manifest → config + layers
//   layers: runtime-<arch> (C runtime and Node), then app (bundle, shared)
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream, mkdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const { values: o } = parseArgs({
  options: {
    work: { type: 'string' },
    out: { type: 'string' },
    version: { type: 'string' },
    revision: { type: 'string' },
    source: { type: 'string' },
    'gzip-level': { type: 'string', default: '6' },
    archive: { type: 'string' },
  },
});
const epoch = Number(process.env.SOURCE_DATE_EPOCH);
if (!Number.isInteger(epoch)) throw new Error('SOURCE_DATE_EPOCH must be set');
const created = new Date(epoch * 1000).toISOString().replace('.000Z', 'Z');

const MT = {
  index: 'application/vnd.oci.image.index.v1+json',
  manifest: 'application/vnd.oci.image.manifest.v1+json',
  config: 'application/vnd.oci.image.config.v1+json',
  layer: 'application/vnd.oci.image.layer.v1.tar+gzip',
};
// Pre-defined annotation keys (image-spec annotations.md); also the config's Labels.
const annotations = {
  'org.opencontainers.image.created': created,
  'org.opencontainers.image.title': 'kubeboot',
  'org.opencontainers.image.description': 'kubeboot approver: approves kube-proxy client and kubelet serving CSRs',
  'org.opencontainers.image.source': o.source,
  'org.opencontainers.image.version': o.version,
  'org.opencontainers.image.revision': o.revision,
  'org.opencontainers.image.licenses': 'Apache-2.0',
};

const blobs = join(o.out, 'oci', 'blobs', 'sha256');
mkdirSync(blobs, { recursive: true });

async function sha256File(file) {
  const h = createHash('sha256');
  for await (const chunk of createReadStream(file)) h.update(chunk);
  return h.digest('hex');
}

/** A tar of `dir` whose bytes depend only on the tree's names, modes, link targets and contents. */
function reproducibleTar(dir, file) {
  const names = execFileSync('find', ['.', '-mindepth', '1', '-printf', '%P\\0'], { cwd: dir, maxBuffer: 1 << 26 })
    .toString()
    .split('\0')
    .filter(Boolean)
    .sort((a, b) => (Buffer.from(a) < Buffer.from(b) ? -1 : 1));
  const list = `${file}.list`;
  writeFileSync(list, names.join('\0') + '\0');
  execFileSync('tar', [
    '--create',
    `--file=${file}`,
    '-C',
    dir,
    '--no-recursion',
    '--null',
    `--files-from=${list}`,
    '--format=posix',
    '--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime',
    `--mtime=@${epoch}`,
    '--owner=0',
    '--group=0',
    '--numeric-owner',
  ]);
  rmSync(list);
}

async function addBlob(file) {
  const digest = await sha256File(file);
  renameSync(file, join(blobs, digest));
  return { digest: `sha256:${digest}`, size: statSync(join(blobs, digest)).size };
}

function addJson(value, mediaType) {
  const bytes = Buffer.from(JSON.stringify(value));
  const digest = createHash('sha256').update(bytes).digest('hex');
  writeFileSync(join(blobs, digest), bytes);
  return { mediaType, digest: `sha256:${digest}`, size: bytes.length };
}

const layerCache = new Map();
async function layer(name) {
  if (layerCache.has(name)) return layerCache.get(name);
  const tar = join(o.work, `${name}.tar`);
  reproducibleTar(join(o.work, name), tar);
  const diffId = `sha256:${await sha256File(tar)}`;
  execFileSync('sh', ['-c', `gzip -n -${Number(o['gzip-level'])} <"$1" >"$1.gz"`, 'sh', tar]);
  const blob = await addBlob(`${tar}.gz`);
  const result = { descriptor: { mediaType: MT.layer, ...blob }, diffId, history: `packaging/image/build.sh: ${name}` };
  layerCache.set(name, result);
  return result;
}

const platforms = [
  { architecture: 'amd64', os: 'linux' },
  { architecture: 'arm64', os: 'linux', variant: 'v8' },
];
const manifests = [];
for (const platform of platforms) {
  const layers = [await layer(`runtime-${platform.architecture}`), await layer('app')];
  const config = addJson(
    {
      created,
      architecture: platform.architecture,
      os: platform.os,
      ...(platform.variant ? { variant: platform.variant } : {}),
      config: {
        User: '65532:65532',
        // The packages' /usr/bin/kubeboot wrapper, without the shell: no
        // inspector on SIGUSR1, a small young generation for the approver
        // (the flag it would otherwise exec itself again to add: agent/node-flags.ts).
        Entrypoint: ['/usr/lib/kubeboot/node', '--disable-sigusr1', '--max-semi-space-size=1', '/usr/lib/kubeboot/kubeboot.cjs'],
        Cmd: ['approver'],
        WorkingDir: '/',
        ExposedPorts: { '10272/tcp': {} },
        StopSignal: 'SIGTERM',
        Labels: annotations,
      },
      rootfs: { type: 'layers', diff_ids: layers.map((l) => l.diffId) },
      history: layers.map((l) => ({ created, created_by: l.history })),
    },
    MT.config,
  );
  const manifest = addJson(
    { schemaVersion: 2, mediaType: MT.manifest, config, layers: layers.map((l) => l.descriptor), annotations },
    MT.manifest,
  );
  manifests.push({ ...manifest, platform });
}
const index = addJson({ schemaVersion: 2, mediaType: MT.index, manifests, annotations }, MT.index);
writeFileSync(join(o.out, 'oci', 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
writeFileSync(
  join(o.out, 'oci', 'index.json'),
  JSON.stringify({
    schemaVersion: 2,
    mediaType: MT.index,
    manifests: [{ ...index, annotations: { 'org.opencontainers.image.ref.name': o.version } }],
  }),
);
reproducibleTar(join(o.out, 'oci'), join(o.out, o.archive));
writeFileSync(join(o.out, 'digest'), `${index.digest}\n`);
