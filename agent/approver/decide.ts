/**
 * One decision about one CSR: recognise it, look up what the rules need,
 * run the rules, then ask the API server whether the requester may have
 * this kind of certificate (a SubjectAccessReview, as kube-controller-
 * manager's csrapproving controller does). The lookups are injected, so the
 * whole decision runs in unit tests without a cluster.
 */
import { KubebootError } from '../errors.js';
import type { ApiServerFacts } from './apiserver.js';
import { blocks, csrFacts, isSettled, type ApproverCsr } from './csr-facts.js';
import {
  AUTHORIZED_RULE,
  evaluate,
  nodeNameOf,
  POLICIES,
  recognize,
  type ApproverPolicy,
  type NodeAddress,
  type PolicyName,
  type World,
} from './policy.js';
import { requestFacts, type RequestFacts } from './request.js';
import { oversizedRequestProblem } from './retain.js';

export type Decision =
  | { kind: 'ignore'; why: 'not-ours' | 'settled' }
  | { kind: 'approve'; policy: PolicyName; message: string }
  | { kind: 'violation'; policy: PolicyName; rule: string; message: string };

export interface Lookups {
  node(name: string): Promise<{ name: string; addresses: NodeAddress[] } | null>;
  /** SubjectAccessReview as the CSR's requester for `create certificatesigningrequests/<subresource>`. */
  allowed(csr: ApproverCsr, subresource: string): Promise<boolean>;
  /** The CSRs the informer knows of the same requester and signer, for the one-unissued-per-node rule. */
  sameRequester(csr: ApproverCsr): Iterable<ApproverCsr>;
  /** The API server's names and addresses (apiserver.ts), for the serving rules. */
  apiServer(): Promise<ApiServerFacts>;
}

export { AUTHORIZED_RULE } from './policy.js';

/** The request's facts, or why there are none (a violation of the request rule). */
async function parsedRequest(csr: ApproverCsr): Promise<RequestFacts | string> {
  if (csr.oversizedRequest) return oversizedRequestProblem(csr.oversizedRequest.bytes);
  try {
    return await requestFacts(csr.spec.request);
  } catch (err) {
    return err instanceof KubebootError ? err.message : 'spec.request is not a PEM certificate request';
  }
}

/**
 * For recognition alone (it reads only the CN): the CN retain.ts kept of a
 * request too large to keep, so such a CSR is ours exactly when it would
 * have been, and reported under the rule it breaks.
 */
function keptSubject(csr: ApproverCsr): RequestFacts | null {
  const commonName = csr.oversizedRequest?.commonName;
  if (commonName == null) return null;
  const none: string[] = [];
  return {
    subject: { commonName, organizations: none },
    dnsNames: none,
    ipAddresses: none,
    emailAddresses: none,
    uris: none,
    otherNames: none,
    key: { kind: 'other', type: 'unread' },
    signatureValid: false,
  };
}

export async function decide(csr: ApproverCsr, policy: ApproverPolicy, lookups: Lookups): Promise<Decision> {
  // Settled first: it is cheap, and most watch events are for CSRs already decided.
  if (isSettled(csr)) return { kind: 'ignore', why: 'settled' };
  const request = await parsedRequest(csr);
  const facts = csrFacts(csr, request);
  const policyName = recognize({ ...facts, request: facts.request ?? keptSubject(csr) }, policy);
  if (policyName === null) return { kind: 'ignore', why: 'not-ours' };
  const spec = POLICIES[policyName];
  const nodeName = nodeNameOf(facts.username);
  const world: World = {
    node: nodeName !== null ? await lookups.node(nodeName) : null,
    blocking: [...lookups.sameRequester(csr)].filter((other) => blocks(other, csr)).map((other) => other.metadata.name),
    apiServer: policyName === 'kubelet-serving' ? await lookups.apiServer() : null,
  };
  const verdict = evaluate(spec.rules, { csr: facts, nodeName, world, policy });
  if (!verdict.ok)
    return { kind: 'violation', policy: policyName, rule: verdict.rule, message: `${policyName} rule ${verdict.rule}: ${verdict.problem}` };
  if (!(await lookups.allowed(csr, spec.subresource))) {
    return {
      kind: 'violation',
      policy: policyName,
      rule: AUTHORIZED_RULE,
      message: `${policyName} rule ${AUTHORIZED_RULE}: SubjectAccessReview denies ${facts.username} create certificatesigningrequests/${spec.subresource} (grant it with RBAC)`,
    };
  }
  return {
    kind: 'approve',
    policy: policyName,
    message: `${policyName}: every rule passed (${spec.rules.map((r) => r.name).join(', ')}) and ${facts.username} may create certificatesigningrequests/${spec.subresource}`,
  };
}
