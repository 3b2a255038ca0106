/**
 * `kubeboot token create|list|delete`: bootstrap tokens for joining nodes,
 * as `kubeadm token` makes them. create prints only the token; list never
 * prints a secret.
 */
import { ApiError, ExitCode, InputError, KubebootError } from '../errors.js';
import { adminClient, explainAdminError, type Admin } from '../join/admin.js';
import {
  generateToken,
  parseTokenId,
  secretName,
  summarize,
  tokenSecret,
  tokenSpecFrom,
  TOKEN_NAMESPACE,
  TOKEN_SECRET_TYPE,
  type NewToken,
  type TokenFlags,
  type TokenSpec,
  type TokenSummary,
} from '../join/token.js';
import { excerpt, terminalJson, terminalLines } from '../text.js';
import { systemClock } from '../time/clock.js';

export type Given = Record<string, string | string[] | boolean>;

const SECRETS = `/api/v1/namespaces/${TOKEN_NAMESPACE}/secrets`;

export async function runToken(
  positionals: string[],
  given: Given,
  output: 'text' | 'json',
  env: Record<string, string | undefined>,
): Promise<number> {
  const [action, ...rest] = positionals;
  const expect = (n: number, usage: string) => {
    if (rest.length !== n) throw new InputError('command line', 'arguments', `usage: kubeboot token ${usage}`);
  };
  switch (action) {
    case 'create': {
      expect(0, 'create [--ttl D | --no-expiry] [--usages U] [--groups G] [--description TEXT]');
      const spec = tokenSpecFrom(given as TokenFlags);
      const created = await withAdmin(given, env, 'create a bootstrap token Secret in kube-system', (admin) =>
        createToken(admin, spec, systemClock.now()),
      );
      process.stdout.write(
        output === 'json' ? terminalJson({ token: created.token.token, ...created.summary }) : `${created.token.token}\n`,
      );
      return ExitCode.ok;
    }
    case 'list': {
      expect(0, 'list');
      const tokens = await withAdmin(given, env, 'list bootstrap tokens in kube-system', listTokens);
      process.stdout.write(output === 'json' ? terminalJson(tokens) : renderTable(tokens));
      return ExitCode.ok;
    }
    case 'delete': {
      expect(1, 'delete ID');
      const id = parseTokenId(rest[0] as string);
      await withAdmin(given, env, `delete bootstrap token ${id}`, async (admin) => {
        try {
          await admin.client.request('DELETE', `${SECRETS}/${secretName(id)}`);
        } catch (err) {
          if (err instanceof ApiError && err.status === 404)
            throw new KubebootError(`no bootstrap token ${id} in ${TOKEN_NAMESPACE}`, ExitCode.badInput);
          throw err;
        }
      });
      process.stdout.write(`bootstrap token ${id} deleted\n`);
      return ExitCode.ok;
    }
    default:
      throw new InputError(
        'command line',
        'token',
        action === undefined ? 'expected create, list or delete' : `unknown action ${JSON.stringify(action)} (want create, list, delete)`,
      );
  }
}

/** Opens the admin client, runs `act`, closes it, and words API failures as one line. */
export async function withAdmin<T>(
  given: Given,
  env: Record<string, string | undefined>,
  doing: string,
  act: (admin: Admin) => Promise<T>,
): Promise<T> {
  const admin = await adminClient(typeof given.kubeconfig === 'string' ? given.kubeconfig : undefined, env);
  try {
    return await act(admin);
  } catch (err) {
    throw explainAdminError(err, admin, doing);
  } finally {
    await admin.client.close();
  }
}

export async function createToken(admin: Admin, spec: TokenSpec, now: Date): Promise<{ token: NewToken; summary: TokenSummary }> {
  const token = generateToken();
  const secret = tokenSecret(token, spec, now);
  const res = await admin.client.request<{ metadata?: { name?: string }; data?: Record<string, string> }>('POST', SECRETS, {
    body: secret,
  });
  const summary = summarize(res.body);
  if (summary === null)
    throw new KubebootError(`the API server returned bootstrap token Secret ${secretName(token.id)} without its token-id`);
  return { token, summary };
}

async function listTokens(admin: Admin): Promise<TokenSummary[]> {
  const res = await admin.client.request<{ items?: { data?: Record<string, string> }[] }>('GET', SECRETS, {
    query: { fieldSelector: `type=${TOKEN_SECRET_TYPE}` },
  });
  return (res.body.items ?? [])
    .map(summarize)
    .filter((s): s is TokenSummary => s !== null)
    .sort((a, b) => a.id.localeCompare(b.id));
}

/** Every cell is the Secret's text (anyone who can write Secrets in kube-system wrote it): bounded and escaped before the columns are measured. */
function renderTable(tokens: TokenSummary[]): string {
  const rows = [['ID', 'EXPIRES', 'USAGES', 'GROUPS', 'DESCRIPTION']];
  for (const t of tokens)
    rows.push(
      [t.id, t.expires ?? '<never>', t.usages.join(',') || '<none>', t.groups.join(',') || '<none>', t.description ?? ''].map((cell) =>
        excerpt(cell),
      ),
    );
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return terminalLines(
    rows.map((r) =>
      r
        .map((cell, i) => cell.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    ),
  );
}
