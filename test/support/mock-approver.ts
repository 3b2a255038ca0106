/**
 * What an approver under undici's MockAgent needs from "the API server" to
 * lead and decide, whatever the test is about: no Lease yet (it creates
 * one), and every SubjectAccessReview allowed.
 */
import type { Interceptable } from 'undici';

export function leadAndAllow(pool: Interceptable): void {
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
