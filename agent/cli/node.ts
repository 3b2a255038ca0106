/**
 * `kubeboot node enroll|replace|revoke|unrevoke|list`: the records `kubeboot
 * approver` reads before it issues a kubelet identity (agent/records/),
 * and what the cluster shows about each node's. revoke also denies the
 * node's pending CSRs of every signer now (the approver approves none of its
 * certificates from then on); a certificate already issued cannot be recalled and lives
 * to its notAfter, which the output says. replace asks --old-machine-gone: a
 * running old machine would keep renewing the same name (docs/node-identity.md,
 * "A replaced machine with the same name"). The requests are
 * agent/admin/node-requests.ts's.
 */
import type { Given } from '../config/load.js';
import { dns1123SubdomainProblem } from '../config/values.js';
import { ExitCode, InputError } from '../errors.js';
import { withAdmin, type Admin } from '../admin/connect.js';
import { enrollNodes, enrolmentOf, parseEnrolmentFile, type Enrolment } from '../admin/enroll.js';
import { renderNodeTable } from '../admin/node.js';
import { listNodes, replaceNode, revokeNode, unrevokeNode } from '../admin/node-requests.js';
import { parseTokenId } from '../admin/token.js';
import { readOptional } from '../read-optional.js';
import { excerpt, terminalJson, terminalLines, type Streams } from '../text.js';
import { systemClock, type Clock } from '../time/clock.js';

const CLI = 'command line';

export async function runNode(
  positionals: string[],
  given: Given,
  output: 'text' | 'json',
  env: Record<string, string | undefined>,
  io: Streams = process,
  clock: Clock = systemClock,
): Promise<number> {
  const [action, ...rest] = positionals;
  const nameArg = (usage: string): string => {
    if (rest.length !== 1) throw new InputError(CLI, 'arguments', `usage: kubeboot node ${usage}`);
    const name = rest[0] as string;
    const problem = dns1123SubdomainProblem(name);
    if (problem !== null) throw new InputError(CLI, 'node name', problem);
    return name;
  };
  if (action !== 'revoke')
    for (const flag of ['reason', 'delete-node'])
      if (given[flag] !== undefined) throw new InputError(CLI, `--${flag}`, 'only with kubeboot node revoke');
  for (const flag of ['for-token', 'old-machine-gone'])
    if (action !== 'replace' && given[flag] !== undefined) throw new InputError(CLI, `--${flag}`, 'only with kubeboot node replace');
  if (action !== 'enroll')
    for (const flag of ['tpm-ek', 'tpm-ak', 'from-file'])
      if (given[flag] !== undefined) throw new InputError(CLI, `--${flag}`, 'only with kubeboot node enroll');
  let act: (admin: Admin) => Promise<string[]>;
  let doing: string;
  switch (action) {
    case 'replace': {
      const name = nameArg('replace NAME --old-machine-gone [--for-token ID]');
      // Same name, two machines: a renewal carries nothing but the key, so the old machine would renew beside the new one.
      if (given['old-machine-gone'] !== true)
        throw new InputError(
          CLI,
          '--old-machine-gone',
          `required: node replace gives ${name} to a new machine while the old machine's kubelet key keeps renewing as system:node:${name}; if the old machine may still run, give the new one a new name (kubeboot token create --node ${name}-2) and kubeboot node revoke ${name}; if it is gone (wiped disk, terminated instance), say so with --old-machine-gone`,
        );
      const forToken = typeof given['for-token'] === 'string' ? parseTokenId(given['for-token']) : null;
      doing = `mark node ${name} as being replaced`;
      act = (admin) => replaceNode(admin.client, name, forToken);
      break;
    }
    case 'revoke': {
      const name = nameArg('revoke NAME [--reason TEXT] [--delete-node]');
      const reason = typeof given.reason === 'string' ? given.reason : '';
      doing = `revoke node ${name}`;
      act = (admin) => revokeNode(admin.client, name, { reason, deleteNode: given['delete-node'] === true, now: clock.now(), io });
      break;
    }
    case 'unrevoke': {
      const name = nameArg('unrevoke NAME');
      doing = `unrevoke node ${name}`;
      act = (admin) => unrevokeNode(admin.client, name);
      break;
    }
    case 'enroll': {
      const enrolments = await enrolmentsGiven(rest, given);
      doing = `enroll the TPM of ${enrolments.length === 1 ? `node ${enrolments[0]?.name}` : `${enrolments.length} nodes`}`;
      act = (admin) => enrollNodes(admin.client, enrolments);
      break;
    }
    case 'list': {
      if (rest.length !== 0) throw new InputError(CLI, 'arguments', 'usage: kubeboot node list [--output json]');
      const rows = await withAdmin(given, env, 'list the Nodes, their CSRs, revocations and replacement marks', (admin) =>
        listNodes(admin.client),
      );
      io.stdout.write(output === 'json' ? terminalJson(rows) : renderNodeTable(rows));
      return ExitCode.ok;
    }
    default:
      throw new InputError(
        CLI,
        'node',
        action === undefined
          ? 'expected enroll, replace, revoke, unrevoke or list'
          : `unknown action ${JSON.stringify(excerpt(action))} (want enroll, replace, revoke, unrevoke, list)`,
      );
  }
  io.stdout.write(terminalLines(await withAdmin(given, env, doing, act)));
  return ExitCode.ok;
}

const ENROLL_USAGE = 'usage: kubeboot node enroll NAME --tpm-ek HASH [--tpm-ak NAME] | kubeboot node enroll --from-file FILE';

/** `enroll NAME --tpm-ek … [--tpm-ak …]`, or `enroll --from-file FILE` (admin/enroll.ts). */
async function enrolmentsGiven(rest: string[], given: Given): Promise<Enrolment[]> {
  const text = (flag: string): string | undefined => (typeof given[flag] === 'string' ? (given[flag] as string) : undefined);
  const file = text('from-file');
  if (file !== undefined) {
    if (rest.length !== 0 || given['tpm-ek'] !== undefined || given['tpm-ak'] !== undefined)
      throw new InputError(CLI, '--from-file', `takes no name, --tpm-ek or --tpm-ak (${ENROLL_USAGE})`);
    const content = await readOptional(file);
    if (content === null) throw new InputError(file, '--from-file', 'does not exist');
    return parseEnrolmentFile(content, file);
  }
  if (rest.length !== 1) throw new InputError(CLI, 'arguments', ENROLL_USAGE);
  return [enrolmentOf(rest[0] as string, text('tpm-ek'), text('tpm-ak'))];
}
