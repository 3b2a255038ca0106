/**
 * `kubeboot records migrate`: the ConfigMap records of an earlier release
 * (records/legacy.ts) become records of records/kinds.ts, then the
 * ConfigMaps are deleted, each only once everything it held is written.
 * Idempotent: a record that exists already is left as it is and said so; a
 * second run finds nothing to move. `--dry-run` prints the same lines and
 * writes nothing. Whoever could write ConfigMaps could have written these:
 * the admin reads what the dry run prints before moving it.
 *
 * What moves: a token's binding (its Secret's uid looked up, its spent
 * names as its status and as their claims); an unclaimed replacement mark,
 * bound to no token (the next `kubeboot token create --node` for the name
 * takes it; its time is now); a revocation (its time is now, the old one kept
 * in the reason); the inventory. A claimed mark is spent: not moved.
 */
import type { KubeClient } from '../kube/client.js';
import { objectPath } from '../kube/objects.js';
import { bindingName, claimRecord } from './bindings.js';
import { INVENTORY_NAME, newRecord, recordRef, recordsPath, type RecordObjects, type RecordResource } from './kinds.js';
import {
  BINDINGS_NAMESPACE,
  LEGACY_CONFIGMAPS,
  LEGACY_INVENTORY,
  LEGACY_REPLACEMENTS,
  LEGACY_REVOCATIONS,
  legacyEntries,
  MIGRATE_COMMAND,
  parseLegacyBinding,
  type LegacyConfigMap,
} from './legacy.js';
import { createRecord } from './requests.js';

/** One record to make, and what to write to its status once made. */
export interface RecordStep {
  resource: RecordResource;
  object: RecordObjects[RecordResource];
  status?: object;
  why: string;
}

/** What one ConfigMap becomes: its records, then its deletion; or why it is left (nothing of it moves). */
export interface ConfigMapPlan {
  configMap: string;
  /** The version read: the ConfigMap is deleted only if it is still that one. */
  resourceVersion?: string;
  records: RecordStep[];
  notes: string[];
  problem: string | null;
}

/** Pure: what the ConfigMaps of `kubeboot` become. `secretUid`: the uid of token id's Secret, null when it is gone. */
export function planMigration(configMaps: readonly LegacyConfigMap[], secretUid: (tokenId: string) => string | null): ConfigMapPlan[] {
  const plans: ConfigMapPlan[] = [];
  for (const cm of [...configMaps].sort((a, b) => a.metadata.name.localeCompare(b.metadata.name))) {
    const name = cm.metadata.name;
    const plan: ConfigMapPlan = {
      configMap: `${BINDINGS_NAMESPACE}/${name}`,
      resourceVersion: cm.metadata.resourceVersion,
      records: [],
      notes: [],
      problem: null,
    };
    const tokenId = /^token-([a-z0-9]{6})$/.exec(name)?.[1];
    if (tokenId !== undefined) {
      const b = parseLegacyBinding(tokenId, cm);
      if ('problem' in b) {
        plan.problem = b.problem;
        plans.push(plan);
        continue;
      }
      const uid = secretUid(tokenId);
      if (uid === null)
        plan.notes.push(`bootstrap token ${tokenId} is gone: its binding moves to keep its names spent, and approves nothing`);
      const spec = {
        tokenID: tokenId,
        maxNodes: b.maxNodes,
        ...(b.prefix === null ? { names: b.names } : { prefix: b.prefix }),
        ...(uid ? { tokenSecretUID: uid } : {}),
      };
      plan.records.push({
        resource: 'tokenbindings',
        object: newRecord('tokenbindings', bindingName(tokenId), { spec }),
        status: { issued: [...b.issued].map(([node, csrUID]) => ({ node, csrUID })) },
        why: `binding of token ${tokenId}: ${b.prefix === null ? b.names.join(',') : `${b.prefix}*`}, ${b.issued.size}/${b.maxNodes} spent`,
      });
      for (const [node, csrUid] of b.issued)
        plan.records.push({ resource: 'nodeclaims', object: claimRecord(node, tokenId, csrUid), why: `${node} spent on token ${tokenId}` });
    } else if (name === LEGACY_REPLACEMENTS) {
      for (const [node, entry] of legacyEntries(cm.data)) {
        if (entry === null || typeof entry.at !== 'string') plan.notes.push(`entry ${node} is not a mark; not moved`);
        else if (typeof entry.claimedBy === 'string')
          plan.notes.push(`the mark of ${node} was claimed (CSR ${entry.claimedBy}); not moved`);
        else
          plan.records.push({
            resource: 'nodereplacements',
            object: newRecord('nodereplacements', node, { spec: { tokenID: '' } }),
            why: `replacement mark of ${node} (marked ${entry.at}; from now, for the next token bound to it)`,
          });
      }
    } else if (name === LEGACY_REVOCATIONS) {
      for (const [node, entry] of legacyEntries(cm.data)) {
        const at = typeof entry?.at === 'string' ? entry.at : '?';
        const reason = typeof entry?.reason === 'string' && entry.reason !== '' ? `${entry.reason} ` : '';
        plan.records.push({
          resource: 'noderevocations',
          object: newRecord('noderevocations', node, {
            spec: { reason: `${reason}(revoked ${at}, moved from ConfigMap kubeboot/revocations)` },
          }),
          why: `revocation of ${node}`,
        });
      }
    } else if (name === LEGACY_INVENTORY) {
      plan.records.push({
        resource: 'inventories',
        object: newRecord('inventories', INVENTORY_NAME, { spec: { nodes: { ...cm.data } } }),
        why: `inventory of ${Object.keys(cm.data ?? {}).length} node(s)`,
      });
    } else continue;
    plans.push(plan);
  }
  return plans;
}

/** The ConfigMaps of the namespace `kubeboot` (none when it is gone). */
async function legacyConfigMaps(client: KubeClient): Promise<LegacyConfigMap[]> {
  const res = await client.request<{ items?: LegacyConfigMap[] }>('GET', LEGACY_CONFIGMAPS, { accept: [404] });
  return res.status === 404 ? [] : (res.body.items ?? []);
}

async function secretUidOf(client: KubeClient, tokenId: string): Promise<string | null> {
  const res = await client.request<{ metadata?: { uid?: string } }>(
    'GET',
    `/api/v1/namespaces/kube-system/secrets/bootstrap-token-${tokenId}`,
    {
      accept: [404],
    },
  );
  return res.status === 404 ? null : (res.body.metadata?.uid ?? null);
}

/** Runs the migration (or, with dryRun, says what it would do): one line per record and ConfigMap. */
export async function migrateRecords(client: KubeClient, dryRun: boolean): Promise<string[]> {
  const configMaps = await legacyConfigMaps(client);
  const uids = new Map<string, string | null>();
  for (const cm of configMaps) {
    const id = /^token-([a-z0-9]{6})$/.exec(cm.metadata.name)?.[1];
    if (id !== undefined) uids.set(id, await secretUidOf(client, id));
  }
  const plans = planMigration(configMaps, (id) => uids.get(id) ?? null);
  if (plans.length === 0) return ['nothing to migrate: no ConfigMap records in namespace kubeboot'];
  const lines: string[] = [];
  for (const plan of plans) {
    if (plan.problem !== null) {
      lines.push(`${plan.configMap}: left as it is (${plan.problem}); fix or delete it, then run again`);
      continue;
    }
    for (const note of plan.notes) lines.push(`${plan.configMap}: ${note}`);
    for (const step of plan.records) {
      const ref = recordRef(step.resource, step.object.metadata.name);
      if (dryRun) {
        lines.push(`${plan.configMap}: would create ${ref}: ${step.why}`);
        continue;
      }
      const made = await createRecord(client, step.resource, step.object, 'nothing was migrated');
      if (made === null) {
        lines.push(`${plan.configMap}: ${ref} exists already; left as it is`);
        continue;
      }
      if (step.status !== undefined)
        await client.request('PATCH', `${objectPath(recordsPath(step.resource), made.metadata.name)}/status`, {
          body: { status: step.status },
          contentType: 'application/merge-patch+json',
        });
      lines.push(`${plan.configMap}: created ${ref}: ${step.why}`);
    }
    if (!dryRun) {
      // On the version read: an entry added since (an older release's `node revoke`) is never deleted unmigrated.
      const preconditions = plan.resourceVersion === undefined ? {} : { preconditions: { resourceVersion: plan.resourceVersion } };
      const res = await client.request('DELETE', objectPath(LEGACY_CONFIGMAPS, plan.configMap.slice(BINDINGS_NAMESPACE.length + 1)), {
        body: { apiVersion: 'v1', kind: 'DeleteOptions', ...preconditions },
        accept: [404, 409],
      });
      if (res.status === 409) {
        lines.push(`${plan.configMap}: changed since it was read; not deleted: run ${MIGRATE_COMMAND} again`);
        continue;
      }
    }
    lines.push(`${plan.configMap}: ${dryRun ? 'would delete' : 'deleted'} the ConfigMap`);
  }
  return lines;
}
