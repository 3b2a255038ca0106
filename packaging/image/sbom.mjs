// Prints the SPDX 2.3 JSON SBOM of one architecture's image: kubeboot, the
// npm packages bundled into it (package-lock.json, production only: the same
// set packaging/third-party-notices.mjs ships licences for), the Node runtime
// and the Debian packages the C runtime comes from. Deterministic: created is
// SOURCE_DATE_EPOCH and the namespace is derived from the content.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const { values: o } = parseArgs({
  options: {
    root: { type: 'string' },
    arch: { type: 'string' },
    'node-version': { type: 'string' },
    debs: { type: 'string' },
    version: { type: 'string' },
    revision: { type: 'string' },
    source: { type: 'string' },
  },
});
const created = new Date(Number(process.env.SOURCE_DATE_EPOCH) * 1000).toISOString().replace('.000Z', 'Z');
const spdxId = (s) => `SPDXRef-${s.replace(/[^A-Za-z0-9.-]+/g, '-')}`;
const purl = (ref) => [{ referenceCategory: 'PACKAGE-MANAGER', referenceType: 'purl', referenceLocator: ref }];
const npmPurl = (name, version) => `pkg:npm/${name.startsWith('@') ? `%40${name.slice(1)}` : name}@${version}`;

const root = {
  SPDXID: 'SPDXRef-Package-kubeboot',
  name: 'kubeboot',
  versionInfo: o.version,
  downloadLocation: o.source,
  sourceInfo: `revision ${o.revision}`,
  filesAnalyzed: false,
  licenseConcluded: 'Apache-2.0',
  licenseDeclared: 'Apache-2.0',
  copyrightText: 'NOASSERTION',
  primaryPackagePurpose: 'CONTAINER',
};
const packages = [root];

const lock = JSON.parse(readFileSync(join(o.root, 'package-lock.json'), 'utf8'));
for (const [path, meta] of Object.entries(lock.packages)) {
  if (path === '' || meta.dev) continue;
  const name = path.replace(/^.*node_modules\//, '');
  const [algorithm, b64] = (meta.integrity ?? '').split('-');
  packages.push({
    SPDXID: spdxId(`Package-npm-${path.replace(/node_modules\//g, '')}-${meta.version}`),
    name,
    versionInfo: meta.version,
    downloadLocation: meta.resolved ?? `https://registry.npmjs.org/${name}/-/${name.split('/').pop()}-${meta.version}.tgz`,
    filesAnalyzed: false,
    licenseConcluded: 'NOASSERTION',
    licenseDeclared: meta.license ?? 'NOASSERTION',
    copyrightText: 'NOASSERTION',
    ...(algorithm && b64
      ? { checksums: [{ algorithm: algorithm.toUpperCase(), checksumValue: Buffer.from(b64, 'base64').toString('hex') }] }
      : {}),
    externalRefs: purl(npmPurl(name, meta.version)),
  });
}

// The runtime is the official build, taken from the npm registry's per-platform package (scripts/node.sh).
const nodePackage = `node-linux-${o.arch === 'amd64' ? 'x64' : o.arch}`;
packages.push({
  SPDXID: spdxId(`Package-node-${o['node-version']}`),
  name: 'node',
  versionInfo: o['node-version'],
  downloadLocation: `https://registry.npmjs.org/${nodePackage}/-/${nodePackage}-${o['node-version']}.tgz`,
  filesAnalyzed: false,
  licenseConcluded: 'NOASSERTION',
  licenseDeclared: 'MIT',
  copyrightText: 'NOASSERTION',
  externalRefs: [
    ...purl(npmPurl(nodePackage, o['node-version'])),
    ...purl(`pkg:generic/node@${o['node-version']}?download_url=https://nodejs.org/dist/v${o['node-version']}/`),
  ],
});

for (const file of readdirSync(o.debs)
  .filter((f) => f.endsWith(`_${o.arch}.deb`))
  .sort()) {
  const deb = join(o.debs, file);
  const [pkg, version, arch, source] = execFileSync('dpkg-deb', [
    '--show',
    // biome-ignore lint/suspicious/noTemplateCurlyInString: dpkg-deb's own format, not a template
    '--showformat=${Package}\\n${Version}\\n${Architecture}\\n${source:Package}',
    deb,
  ])
    .toString()
    .split('\n');
  packages.push({
    SPDXID: spdxId(`Package-deb-${pkg}-${version}-${arch}`),
    name: pkg,
    versionInfo: version,
    downloadLocation: 'NOASSERTION',
    sourceInfo: `Debian source package ${source || pkg}`,
    filesAnalyzed: false,
    licenseConcluded: 'NOASSERTION',
    licenseDeclared: 'NOASSERTION',
    copyrightText: 'NOASSERTION',
    checksums: [{ algorithm: 'SHA256', checksumValue: createHash('sha256').update(readFileSync(deb)).digest('hex') }],
    externalRefs: purl(`pkg:deb/debian/${pkg}@${encodeURIComponent(version)}?arch=${arch}&distro=debian-12`),
  });
}

const body = {
  spdxVersion: 'SPDX-2.3',
  dataLicense: 'CC0-1.0',
  SPDXID: 'SPDXRef-DOCUMENT',
  name: `kubeboot-${o.version}-linux-${o.arch}`,
  creationInfo: { created, creators: ['Tool: kubeboot-packaging-image-sbom'] },
  packages,
  relationships: [
    { spdxElementId: 'SPDXRef-DOCUMENT', relationshipType: 'DESCRIBES', relatedSpdxElement: root.SPDXID },
    ...packages.slice(1).map((p) => ({ spdxElementId: root.SPDXID, relationshipType: 'CONTAINS', relatedSpdxElement: p.SPDXID })),
  ],
};
const namespace = `${o.source.replace(/\.git$/, '')}/spdx/kubeboot-${o.version}-${o.arch}-${createHash('sha256').update(JSON.stringify(body)).digest('hex').slice(0, 16)}`;
const { spdxVersion, dataLicense, SPDXID, name, ...rest } = body;
process.stdout.write(`${JSON.stringify({ spdxVersion, dataLicense, SPDXID, name, documentNamespace: namespace, ...rest }, null, 2)}\n`);
