/**
 * What an approver under undici's MockAgent needs from "the API server" to
 * lead and decide, whatever the test is about: no Lease yet (it creates
 * one), every SubjectAccessReview allowed, and no records (agent/records/:
 * each list empty, unless the test answered it first) but the beacon the
 * leader creates.
 */
import type { Interceptable } from 'undici';
import { KINDS, RECORD_RESOURCES, recordsPath } from '../../agent/records/kinds.js';

export function leadAndAllow(pool: Interceptable): void {
  emptyRecords(pool);
  pool
    .intercept({ path: '/apis/authorization.k8s.io/v1/subjectaccessreviews', method: 'POST' })
    .reply(201, { status: { allowed: true } })
    .persist();
  pool
    .intercept({ path: (p) => p.includes('/leases/'), method: 'GET' })
    .reply(404, { kind: 'Status', code: 404 })
    .persist();
  pool
    .intercept({ path: (p) => p.endsWith('/leases'), method: 'POST' })
    .reply(201, {})
    .persist();
}

/** Every record list answered empty (agent/records/): the approver's record informers sync, so it may lead. */
export function emptyRecords(pool: Interceptable): void {
  for (const resource of RECORD_RESOURCES)
    pool
      .intercept({ path: (p) => p.startsWith(`${recordsPath(resource)}?`) && !p.includes('watch=true'), method: 'GET' })
      .reply(200, { kind: `${KINDS[resource]}List`, metadata: { resourceVersion: '1' }, items: [] })
      .persist();
  pool
    .intercept({ path: (p) => p.startsWith('/api/v1/namespaces/kubeboot/configmaps?') && !p.includes('watch=true'), method: 'GET' })
    .reply(200, { kind: 'ConfigMapList', metadata: { resourceVersion: '1' }, items: [] })
    .persist();
  // The leader's beacon (approver/beacon.ts): its create answered as the API server would, echoing it.
  pool
    .intercept({ path: recordsPath('tpmbeacons'), method: 'POST' })
    .reply(({ body }) => ({ statusCode: 201, data: { ...JSON.parse(String(body)), metadata: { name: 'kubeboot', resourceVersion: '2' } } }))
    .persist();
  // Their watches bring nothing (answered when the test ends), so no re-list timer is armed.
  pool
    .intercept({
      path: (p) => p.includes('watch=true') && (p.startsWith('/apis/kubeboot.io/') || p.startsWith('/api/v1/namespaces/kubeboot/')),
      method: 'GET',
    })
    .reply(200, '')
    .delay(600_000)
    .persist();
}
