// Applies the shipped cluster-side manifests (packaging/manifests/) the way
// `kubectl apply -f` would for objects that do not exist yet: POST each one.
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import type { AdminApi } from './admin.js';
import { expectStatus, type KubeClient } from './http.js';

export const manifestsDir = fileURLToPath(new URL('../../packaging/manifests/', import.meta.url));

// The kinds the manifests use; anything else is a mistake in a manifest.
const kinds: Record<string, { plural: string; namespaced: boolean }> = {
  ClusterRole: { plural: 'clusterroles', namespaced: false },
  ClusterRoleBinding: { plural: 'clusterrolebindings', namespaced: false },
  Role: { plural: 'roles', namespaced: true },
  RoleBinding: { plural: 'rolebindings', namespaced: true },
  ConfigMap: { plural: 'configmaps', namespaced: true },
  Namespace: { plural: 'namespaces', namespaced: false },
  ServiceAccount: { plural: 'serviceaccounts', namespaced: true },
  FlowSchema: { plural: 'flowschemas', namespaced: false },
  PriorityLevelConfiguration: { plural: 'prioritylevelconfigurations', namespaced: false },
  CustomResourceDefinition: { plural: 'customresourcedefinitions', namespaced: false },
};

export interface Manifest {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
}

export function readManifests(file: string): Manifest[] {
  return parseAllDocuments(readFileSync(file, 'utf8'))
    .map((doc) => {
      if (doc.errors.length > 0) throw new Error(`${file}: ${doc.errors[0]?.message}`);
      return doc.toJS() as Manifest | null;
    })
    .filter((m): m is Manifest => m !== null);
}

export function collectionPath(m: Manifest): string {
  const kind = kinds[m.kind];
  if (!kind) throw new Error(`manifest ${m.metadata.name}: unsupported kind ${m.kind}`);
  const group = m.apiVersion.includes('/') ? `/apis/${m.apiVersion}` : `/api/${m.apiVersion}`;
  if (!kind.namespaced) return `${group}/${kind.plural}`;
  if (!m.metadata.namespace) throw new Error(`manifest ${m.kind}/${m.metadata.name}: metadata.namespace missing`);
  return `${group}/namespaces/${m.metadata.namespace}/${kind.plural}`;
}

/** A CRD serves its objects once Established (kubectl wait --for=condition=Established). */
async function established(client: Pick<KubeClient, 'request'>, name: string): Promise<void> {
  for (let i = 0; i < 300; i++) {
    const res = await client.request<{ status?: { conditions?: { type?: string; status?: string }[] } }>(
      'GET',
      `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`,
    );
    if (res.body.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True')) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`CustomResourceDefinition ${name} did not become Established within 30 s`);
}

/**
 * Creates every object in every `*.yaml` of the directory (or those `keep`
 * accepts); an existing object (409) is left as it is.
 */
export async function applyManifests(
  client: Pick<KubeClient, 'request'>,
  dir = manifestsDir,
  keep: (m: Manifest) => boolean = () => true,
): Promise<string[]> {
  const applied: string[] = [];
  for (const file of readdirSync(dir)
    .filter((f) => f.endsWith('.yaml'))
    .sort()) {
    for (const m of readManifests(join(dir, file)).filter(keep)) {
      const what = `${m.kind}/${m.metadata.name}`;
      expectStatus(await client.request('POST', collectionPath(m), m), `apply ${file}: ${what}`, 201, 409);
      if (m.kind === 'CustomResourceDefinition') await established(client, m.metadata.name);
      applied.push(what);
    }
  }
  return applied;
}

/**
 * Resolves once the API server's priority-and-fairness controller has read
 * FlowSchema `name` and found its priority level (condition Dangling False):
 * before that, a request may still be classed by the schema it replaces.
 */
export async function flowSchemaInEffect(admin: AdminApi, name: string): Promise<void> {
  const path = `/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/${name}`;
  await admin.waitFor(
    `FlowSchema ${name} read by the API server, its level found`,
    async () => {
      const res = await admin.request<{ status?: { conditions?: { type: string; status: string }[] } }>('GET', path);
      expectStatus(res, `GET ${path}`, 200);
      return res.body.status?.conditions?.find((c) => c.type === 'Dangling')?.status === 'False' ? true : undefined;
    },
    30_000,
  );
}
