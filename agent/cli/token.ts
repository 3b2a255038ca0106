/**
 * `kubeboot token create|list|delete`: bootstrap tokens for joining nodes,
 * as `kubeadm token` makes them. create prints only the token; list never
 * prints a secret. `--node`/`--pool` bind the token to what it may join: a
 * TokenBinding `tokenbindings.kubeboot.io/<id>` (agent/records/bindings.ts)
 * that `kubeboot approver` reads, written before the token exists (and
 * given its Secret's uid once it does) and deleted after it, so no token is
 * ever without its binding (agent/admin/cluster-requests.ts).
 */
import type { Given } from '../config/load.js';
import { ExitCode, InputError } from '../errors.js';
import { withAdmin } from '../admin/connect.js';
import { createTokenForCluster, deleteToken, listTokens, type ListedToken } from '../admin/cluster-requests.js';
import { bindingSpecFrom, bindingView, parseTokenId, tokenSpecFrom, type BindingFlags, type TokenFlags } from '../admin/token.js';
import { columns, excerpt, terminalJson, terminalLines } from '../text.js';
import { systemClock } from '../time/clock.js';

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
      expect(
        0,
        'create [--node NAME | --pool PREFIX --max-nodes N] [--ttl D | --no-expiry] [--usages U] [--groups G] [--description TEXT]',
      );
      const spec = tokenSpecFrom(given as TokenFlags);
      const binding = bindingSpecFrom(given as BindingFlags);
      const created = await withAdmin(given, env, 'create a bootstrap token Secret in kube-system', (admin) =>
        createTokenForCluster(admin, spec, systemClock.now(), binding),
      );
      process.stdout.write(
        output === 'json' ? terminalJson({ token: created.token.token, ...created.summary }) : `${created.token.token}\n`,
      );
      process.stderr.write(terminalLines(created.notes.map((n) => `kubeboot token: ${n}`)));
      return ExitCode.ok;
    }
    case 'list': {
      expect(0, 'list');
      const listed = await withAdmin(given, env, 'list bootstrap tokens in kube-system', listTokens);
      // A binding's spent names are a Map (agent/records/bindings.ts): shown as an object.
      const json = listed.tokens.map((tk) =>
        tk.binding !== null && 'issued' in tk.binding
          ? { ...tk, binding: { ...tk.binding, issued: Object.fromEntries(tk.binding.issued) } }
          : tk,
      );
      process.stdout.write(output === 'json' ? terminalJson(json) : renderTokenTable(listed));
      return ExitCode.ok;
    }
    case 'delete': {
      expect(1, 'delete ID');
      const id = parseTokenId(rest[0] as string);
      const said = await withAdmin(given, env, `delete bootstrap token ${id}`, (admin) => deleteToken(admin, id));
      process.stdout.write(`${said}\n`);
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

/** Every cell is the Secret's or ConfigMap's text (anyone who can write Secrets in kube-system wrote it): columns() bounds and escapes it. */
export function renderTokenTable({ tokens, orphans }: { tokens: ListedToken[]; orphans: string[] }): string {
  const rows = [['ID', 'EXPIRES', 'USAGES', 'GROUPS', 'JOINS', 'SPENT', 'DESCRIPTION']];
  for (const t of tokens) {
    const view = bindingView(t.binding);
    rows.push([
      t.id,
      t.expires ?? '<never>',
      t.usages.join(',') || '<none>',
      t.groups.join(',') || '<none>',
      view.joins,
      view.spent,
      t.description ?? '',
    ]);
  }
  const lines = columns(rows);
  if (orphans.length > 0)
    lines.push(`bindings whose token is gone (kubeboot token delete ID removes one): ${orphans.map((id) => excerpt(id)).join(', ')}`);
  return terminalLines(lines);
}
