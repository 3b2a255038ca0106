/**
 * The approval policy as named, pure rules (the shape of
 * postfinance/kubelet-csr-approver's checks, with kube-controller-manager's
 * csrapproving SubjectAccessReview as the last step, done by the caller).
 * Each rule looks at one property of a CSR and returns the problem, or null.
 * The first rule that fails names the violation in the Event, the log line
 * and the metrics, so an operator can tell exactly what to fix. The rows are
 * kept by signer under rules/; here, which policy a CSR falls under, running
 * its rules, and the docs' rule tables made from them.
 */
import { KUBE_PROXY_CLIENT } from './rules/kube-proxy-client.js';
import { KUBELET_CLIENT } from './rules/kubelet-client.js';
import { KUBELET_SERVING } from './rules/kubelet-serving.js';
import {
  nodeNameOf,
  requesterKind,
  type ApproverPolicy,
  type CsrFacts,
  type PolicyName,
  type PolicySpec,
  type Recognized,
  type RequesterKind,
  type Rule,
  type RuleInput,
  type WorldRead,
} from './rules/rule.js';

/** Every policy, by name: each signer's (rules/), with the rows it runs and how it recognises its CSRs. */
export const POLICIES: Readonly<Record<PolicyName, PolicySpec>> = {
  'kube-proxy-client': KUBE_PROXY_CLIENT,
  'kubelet-serving': KUBELET_SERVING,
  'kubelet-client': KUBELET_CLIENT,
};

/** The subresource the SubjectAccessReview asks about, for a CSR that passed the rules (so its requester has a kind). */
export function subresourceFor(spec: PolicySpec, csr: Pick<CsrFacts, 'username' | 'groups'>): string {
  return typeof spec.subresource === 'string' ? spec.subresource : spec.subresource[requesterKind(csr) ?? 'node'];
}

/** The node the certificate is for (RuleInput.nodeName). */
export function nodeNameFor(spec: PolicySpec, csr: Pick<CsrFacts, 'username' | 'request'>): string | null {
  return nodeNameOf(spec.node === 'requester' ? csr.username : (csr.request?.subject.commonName ?? ''));
}

/**
 * Which policy a CSR falls under, or null when it is none of the approver's
 * business (left untouched): the enabled policy that recognises it
 * (sarapprove.go's recognizers, one per signer).
 */
export function recognize(csr: Recognized, policy: ApproverPolicy): PolicyName | null {
  return Object.values(POLICIES).find((spec) => spec.enabled(policy) && spec.recognizes(csr, policy))?.name ?? null;
}

export type Verdict = { ok: true } | { ok: false; rule: string; problem: string };

/** The rules that run for this CSR: all of them, but for a rule of the other kind of requester or the other --inventory. */
export function applicable(rules: readonly Rule[], csr: Pick<CsrFacts, 'username' | 'groups'>, policy: ApproverPolicy): Rule[] {
  const kind = requesterKind(csr);
  const inventory = policy.inventory === true ? 'on' : 'off';
  return rules.filter((rule) => (rule.only === undefined || rule.only === kind) && (rule.inventory ?? inventory) === inventory);
}

/** Whether a rule that runs for this CSR reads `what` (so it must be looked up). */
export function readsWorld(
  rules: readonly Rule[],
  csr: Pick<CsrFacts, 'username' | 'groups'>,
  policy: ApproverPolicy,
  what: WorldRead,
): boolean {
  return applicable(rules, csr, policy).some((rule) => rule.reads?.includes(what) === true);
}

/** Signers of the policies with a rule reading `what`: a CSR of another signer never needs it. */
export function signersReading(what: WorldRead): Set<string> {
  return new Set(
    Object.values(POLICIES)
      .filter((spec) => spec.rules.some((rule) => rule.reads?.includes(what) === true))
      .map((spec) => spec.signerName),
  );
}

/** Runs the rules in order; the first failure is the verdict. */
export function evaluate(rules: readonly Rule[], input: RuleInput): Verdict {
  for (const rule of applicable(rules, input.csr, input.policy)) {
    const problem = rule.check(input);
    if (problem !== null) return { ok: false, rule: rule.name, problem };
  }
  return { ok: true };
}

/** The rule the SubjectAccessReview is reported as. */
export const AUTHORIZED_RULE = 'authorized';

const REQUESTER_KINDS: Record<RequesterKind, string> = { bootstrap: 'first issue', node: 'renewal' };
const INVENTORY_MODES = { on: 'with `--inventory` only', off: 'without `--inventory` only' } as const;

/** A rule's row: its summary, after the conditions under which it runs at all. */
function ruleRow(rule: Rule): string {
  const when = [
    ...(rule.only === undefined ? [] : [`${REQUESTER_KINDS[rule.only]} only`]),
    ...(rule.inventory === undefined ? [] : [INVENTORY_MODES[rule.inventory]]),
  ];
  return when.length === 0 ? rule.summary : `${when.join(', ')}: ${rule.summary}`;
}

/** The last check of every policy, made by the caller (decide.ts) once every rule has passed. */
export function authorizedSummary(spec: PolicySpec): string {
  const on =
    typeof spec.subresource === 'string'
      ? `\`certificatesigningrequests/${spec.subresource}\``
      : Object.entries(spec.subresource)
          .map(([kind, sub]) => `\`certificatesigningrequests/${sub}\` (${REQUESTER_KINDS[kind as RequesterKind]})`)
          .join(' or ');
  return `a SubjectAccessReview as the CSR's user, uid, groups and extra allows \`create\` on ${on}`;
}

/** docs/approver.md's rule tables: each policy's rules in the order they run, the first failure being the one reported. */
export function renderRuleTables(): string {
  return Object.values(POLICIES)
    .map((spec) => {
      const rows = [...spec.rules.map((r) => [r.name, ruleRow(r)]), [AUTHORIZED_RULE, authorizedSummary(spec)]];
      return [
        `**${spec.name}** (signer \`${spec.signerName}\`)`,
        '',
        '| Rule | Requires |',
        '|---|---|',
        ...rows.map(([name, summary]) => `| \`${name}\` | ${summary} |`),
        '',
      ].join('\n');
    })
    .join('\n');
}
