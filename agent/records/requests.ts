/**
 * The admin's requests on the records (records/kinds.ts): `kubeboot token`,
 * `kubeboot node` and `kubeboot records migrate` write them with the
 * admin's credential. Each is one request; a 404 on a collection means
 * kubeboot's CustomResourceDefinitions are not installed, said with the
 * command that installs them.
 */
import { KubebootError } from '../errors.js';
import type { KubeClient } from '../kube/client.js';
import { listAll } from '../kube/list.js';
import { expectObject, objectPath } from '../kube/objects.js';
import { KINDS, recordRef, recordsPath, type RecordObject, type RecordObjects, type RecordResource } from './kinds.js';

/** What installs the CustomResourceDefinitions (and the approver's access to them). */
export const MANIFESTS_COMMAND = 'kubectl apply -f /usr/share/kubeboot/manifests/ -f /usr/share/kubeboot/manifests/approver/';

/** A request on a record collection answered 404: the CustomResourceDefinitions are not installed. */
export function recordsMissing(what: string): KubebootError {
  return new KubebootError(`the kubeboot.io records are not installed in this cluster (${what}); install them with: ${MANIFESTS_COMMAND}`);
}

/** The record, or null when there is none. */
export async function readRecord<R extends RecordResource>(
  client: KubeClient,
  resource: R,
  name: string,
): Promise<RecordObjects[R] | null> {
  const res = await client.request('GET', objectPath(recordsPath(resource), name), { accept: [404] });
  return res.status === 404 ? null : expectObject<RecordObjects[R]>(res.body, KINDS[resource], name);
}

/** Creates it: the object made, or null when one of that name exists (409). */
export async function createRecord<R extends RecordResource>(
  client: KubeClient,
  resource: R,
  object: RecordObjects[R],
  what: string,
): Promise<RecordObjects[R] | null> {
  const res = await client.request('POST', recordsPath(resource), { body: object, accept: [404, 409] });
  if (res.status === 409) return null;
  if (res.status === 404) throw recordsMissing(what);
  return expectObject<RecordObjects[R]>(res.body, KINDS[resource], object.metadata.name);
}

/** Deletes it: false when there was none. */
export async function deleteRecord(client: KubeClient, resource: RecordResource, name: string): Promise<boolean> {
  const res = await client.request('DELETE', objectPath(recordsPath(resource), name), { accept: [404] });
  return res.status !== 404;
}

/**
 * A JSON merge patch of the record's spec, on the resourceVersion read (a
 * precondition): false when it changed or went meanwhile.
 */
export async function patchSpec(client: KubeClient, record: RecordObject, resource: RecordResource, spec: object): Promise<boolean> {
  const res = await client.request('PATCH', objectPath(recordsPath(resource), record.metadata.name), {
    body: { metadata: { resourceVersion: record.metadata.resourceVersion }, spec },
    contentType: 'application/merge-patch+json',
    accept: [404, 409],
  });
  return res.status !== 404 && res.status !== 409;
}

/** Every record of a resource; none when the resource is not installed. */
export async function listRecords<R extends RecordResource>(client: KubeClient, resource: R): Promise<RecordObjects[R][]> {
  return listAll<RecordObjects[R]>(client, recordsPath(resource), { kind: KINDS[resource], absentIf: [404] });
}

export { recordRef };
