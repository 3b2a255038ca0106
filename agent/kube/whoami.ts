/** Who the API server says a credential is: a SelfSubjectReview (GA since 1.28). */
import type { KubeClient } from './client.js';

export interface UserInfo {
  username: string;
  groups: string[];
}

interface SelfSubjectReview {
  status?: { userInfo?: { username?: string; groups?: string[] } };
}

export async function whoAmI(client: KubeClient, signal?: AbortSignal): Promise<UserInfo> {
  const res = await client.request<SelfSubjectReview>('POST', '/apis/authentication.k8s.io/v1/selfsubjectreviews', {
    body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview', metadata: {} },
    ...(signal ? { signal } : {}),
  });
  const info = res.body.status?.userInfo;
  return { username: info?.username ?? '', groups: info?.groups ?? [] };
}
