// `npm run image`: the approver's OCI image. What it holds (the pinned Node,
// the bundle, the C runtime; no shell, no package manager), how it runs (user
// 65532, the kubeboot entrypoint), the labels and the SBOM, that skopeo reads
// the archive, that the arm64 root filesystem runs, and that building again
// gives the same digest. (test/e2e/approver-image.test.ts runs it under podman
// against a real control plane.)
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import t from 'tap';
import { buildImage, imageArchive, imageDir, imageTools, Layout, sha256, unpackRootfs } from './fixtures/image.js';
import { elfMachine, nodeVersion, output, repoRoot, toolsOrSkip, version } from './fixtures/packages.js';

const ELF = { amd64: 62, arm64: 183 } as Record<string, number>;

if (toolsOrSkip(t, imageTools, true)) {
  const began = Date.now();
  buildImage();
  t.comment(`npm run image: ${Date.now() - began} ms (0 when up to date)`);
  const layout = new Layout(join(imageDir, 'oci'));
  const platforms = layout.platforms();
  const epoch = Number(process.env.SOURCE_DATE_EPOCH ?? output('git', ['log', '-1', '--format=%ct']).trim());
  const lock = JSON.parse(readFileSync(join(repoRoot, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, { version: string; dev?: boolean }>;
  };

  t.test('one image index for linux/amd64 and linux/arm64, tagged with the version', async (t) => {
    t.equal(layout.top.manifests.length, 1, 'index.json names one image');
    t.equal(layout.top.manifests[0]?.mediaType, 'application/vnd.oci.image.index.v1+json', 'an image index');
    t.equal(layout.top.manifests[0]?.annotations?.['org.opencontainers.image.ref.name'], version);
    t.same(
      platforms.map((p) => p.platform),
      [
        { architecture: 'amd64', os: 'linux' },
        { architecture: 'arm64', os: 'linux', variant: 'v8' },
      ],
    );
    t.equal(
      readFileSync(join(imageDir, 'digest'), 'utf8').trim(),
      layout.top.manifests[0]?.digest,
      'dist/image/digest is the index digest',
    );
    for (const p of platforms)
      t.equal(p.config.architecture, p.platform.architecture, `${p.platform.architecture}: the config says so too`);
    t.equal(
      platforms[0]!.manifest.layers.at(-1)?.digest,
      platforms[1]!.manifest.layers.at(-1)?.digest,
      'the bundle layer is one blob shared by both',
    );
    // Every blob is what its descriptor says.
    for (const p of platforms) {
      for (const d of [p.manifest.config, ...p.manifest.layers]) {
        const bytes = layout.blob(d.digest);
        t.equal(sha256(bytes), d.digest, `${p.platform.architecture}: blob ${d.digest.slice(7, 19)} matches its digest`);
        t.equal(bytes.length, d.size);
      }
      t.same(
        p.manifest.layers.map((l) => sha256(gunzipSync(layout.blob(l.digest)))),
        p.config.rootfs.diff_ids,
        `${p.platform.architecture}: diff_ids are the uncompressed layers`,
      );
    }
  });

  t.test('runs kubeboot as 65532 with the OCI labels', async (t) => {
    const revision = output('git', ['rev-parse', 'HEAD']).trim();
    for (const p of platforms) {
      const c = p.config.config;
      t.equal(c.User, '65532:65532', 'non-root user 65532');
      t.same(
        c.Entrypoint,
        ['/usr/lib/kubeboot/node', '--disable-sigusr1', '--max-semi-space-size=1', '/usr/lib/kubeboot/kubeboot.cjs'],
        'the entrypoint is Node and the bundle, no shell',
      );
      t.same(c.Cmd, ['approver']);
      t.match(
        c.Labels,
        {
          'org.opencontainers.image.version': version,
          'org.opencontainers.image.revision': revision,
          'org.opencontainers.image.licenses': 'Apache-2.0',
          'org.opencontainers.image.source': /^https:\/\//,
          'org.opencontainers.image.created': new Date(epoch * 1000).toISOString().replace('.000Z', 'Z'),
        },
        `${p.platform.architecture}: labels`,
      );
      t.same(p.manifest.annotations, c.Labels, 'the same as manifest annotations');
    }
  });

  t.test('layers: only the runtime and the bundle, owned by root, mtimes SOURCE_DATE_EPOCH, sorted', async (t) => {
    for (const p of platforms) {
      const names: string[] = [];
      for (const l of p.manifest.layers) {
        const listing = output('tar', ['-tvzf', layout.blobPath(l.digest), '--numeric-owner', '--full-time'])
          .trim()
          .split('\n');
        const entries = listing.map((line) => /^(\S+) (\d+)\/(\d+)\s+\d+ (\S+ \S+) (.*)$/.exec(line)!);
        t.ok(
          entries.every((e) => e?.[2] === '0' && e[3] === '0'),
          `${p.platform.architecture}: every entry 0:0`,
        );
        const stamp = new Date(epoch * 1000).toISOString().replace('T', ' ').slice(0, 19);
        t.ok(
          entries.every((e) => e?.[4] === stamp),
          `${p.platform.architecture}: every mtime ${stamp}`,
        );
        const layerNames = entries.map((e) => e![5]!.replace(/ -> .*$/, ''));
        t.same(
          layerNames,
          [...layerNames].sort((a, b) => (Buffer.from(a) < Buffer.from(b) ? -1 : 1)),
          'entries in byte order',
        );
        names.push(...layerNames);
      }
      const files = new Set(names);
      for (const must of [
        'usr/lib/kubeboot/node',
        'usr/lib/kubeboot/kubeboot.cjs',
        'etc/passwd',
        'usr/share/doc/kubeboot/sbom.spdx.json',
        'usr/share/doc/kubeboot/THIRD-PARTY-NOTICES',
        'usr/share/doc/node/LICENSE',
        'usr/share/doc/libc6/copyright',
      ]) {
        t.ok(files.has(must), `${p.platform.architecture}: has ${must}`);
      }
      const forbidden = names.filter((n) => /(^|\/)(s?bin\/|sh$|bash$|busybox$|dpkg|apt|rpm\b|yum|dnf)/.test(n));
      t.same(forbidden, [], `${p.platform.architecture}: no shell, no bin directory, no package manager`);
    }
  });

  t.test("the arm64 root filesystem runs kubeboot (qemu-user, the image's own loader and libraries)", async (t) => {
    for (const p of platforms) {
      const rootfs = unpackRootfs(t, layout, p);
      t.equal(
        elfMachine(join(rootfs, 'usr/lib/kubeboot/node')),
        ELF[p.platform.architecture],
        `${p.platform.architecture}: Node for that machine`,
      );
      t.match(readFileSync(join(rootfs, 'etc/passwd'), 'utf8'), /^nonroot:x:65532:65532:/m, 'user 65532 exists');
      if (p.platform.architecture !== 'arm64') continue;
      const argv = [...p.config.config.Entrypoint.map((a) => (a.startsWith('/') ? join(rootfs, a) : a)), '--version'];
      const out = output('qemu-aarch64-static', ['-L', rootfs, ...argv], { env: { PATH: '/usr/bin:/bin' } });
      t.equal(out, `kubeboot ${version} (node v${nodeVersion})\n`, 'arm64: kubeboot --version');
    }
  });

  t.test('an SPDX SBOM of the npm dependencies, Node and the Debian libraries, in and beside the image', async (t) => {
    for (const p of platforms) {
      const arch = p.platform.architecture;
      const sbom = JSON.parse(readFileSync(join(imageDir, `kubeboot-${version}-${arch}.spdx.json`), 'utf8'));
      const rootfs = unpackRootfs(t, layout, p);
      t.same(
        JSON.parse(readFileSync(join(rootfs, 'usr/share/doc/kubeboot/sbom.spdx.json'), 'utf8')),
        sbom,
        `${arch}: the image carries the same SBOM`,
      );
      t.equal(sbom.spdxVersion, 'SPDX-2.3');
      const by = (name: string) =>
        (sbom.packages as { name: string; versionInfo: string; externalRefs?: { referenceLocator: string }[] }[]).filter(
          (x) => x.name === name,
        );
      const production = Object.entries(lock.packages).filter(([path, m]) => path !== '' && !m.dev);
      for (const [path, m] of production) {
        const name = path.replace(/^.*node_modules\//, '');
        t.ok(
          by(name).some((x) => x.versionInfo === m.version),
          `${arch}: ${name}@${m.version}`,
        );
      }
      t.notOk(by('tap').length || by('typescript').length || by('esbuild').length, 'no dev dependency');
      t.equal(by('node')[0]?.versionInfo, nodeVersion, `${arch}: Node ${nodeVersion}`);
      t.match(
        by('libc6')[0]?.externalRefs?.[0]?.referenceLocator,
        new RegExp(`^pkg:deb/debian/libc6@.*arch=${arch}`),
        `${arch}: glibc from Debian, this architecture`,
      );
      const described = (sbom.relationships as { relationshipType: string; relatedSpdxElement: string }[]).filter(
        (r) => r.relationshipType === 'CONTAINS',
      );
      t.equal(described.length, sbom.packages.length - 1, 'kubeboot CONTAINS every other package');
    }
  });

  t.test('skopeo reads the archive, for each architecture', async (t) => {
    for (const arch of ['amd64', 'arm64']) {
      const info = JSON.parse(output('skopeo', ['--override-arch', arch, 'inspect', `oci-archive:${imageArchive()}:${version}`]));
      t.equal(info.Architecture, arch);
      t.equal(info.Digest, readFileSync(join(imageDir, 'digest'), 'utf8').trim(), `${arch}: reached through the index`);
    }
  });

  t.test('the same inputs give the same digest: a second build elsewhere, another umask and time zone', async (t) => {
    const other = mkdtempSync(join(tmpdir(), 'kubeboot-image-again-'));
    t.teardown(() => rmSync(other, { recursive: true, force: true }));
    const again = Date.now();
    execFileSync('bash', ['-c', 'umask 077; exec bash packaging/image/build.sh "$1"', 'build', other], {
      cwd: repoRoot,
      env: { ...process.env, KUBEBOOT_IMAGE_FORCE: '1', TZ: 'Pacific/Kiritimati' },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    t.comment(`second build: ${Date.now() - again} ms`);
    const first = readFileSync(join(imageDir, 'digest'), 'utf8').trim();
    const second = readFileSync(join(other, 'digest'), 'utf8').trim();
    t.comment(`digests: ${first} ${second}`);
    t.equal(second, first, 'same image index digest');
    t.same(readdirSync(join(other, 'oci/blobs/sha256')).sort(), readdirSync(join(imageDir, 'oci/blobs/sha256')).sort(), 'the same blobs');
    t.equal(sha256(readFileSync(imageArchive(other))), sha256(readFileSync(imageArchive())), 'the same oci-archive bytes');
  });
}
