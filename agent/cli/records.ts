/**
 * `kubeboot records migrate [--dry-run]`: moves the ConfigMap records of an
 * earlier release (namespace `kubeboot`) into kubeboot's own API group,
 * which only the cluster admin can write (agent/records/migrate.ts). The
 * approver refuses to act on a ConfigMap record until it is moved.
 */
import type { Given } from '../config/load.js';
import { ExitCode, InputError } from '../errors.js';
import { withAdmin } from '../admin/connect.js';
import { migrateRecords } from '../records/migrate.js';
import { excerpt, terminalLines, type Streams } from '../text.js';

export async function runRecords(
  positionals: string[],
  given: Given,
  env: Record<string, string | undefined>,
  io: Streams = process,
): Promise<number> {
  const [action, ...rest] = positionals;
  if (action !== 'migrate')
    throw new InputError(
      'command line',
      'records',
      action === undefined ? 'expected migrate' : `unknown action ${JSON.stringify(excerpt(action))} (want migrate)`,
    );
  if (rest.length !== 0) throw new InputError('command line', 'arguments', 'usage: kubeboot records migrate [--dry-run]');
  const dryRun = given['dry-run'] === true;
  const lines = await withAdmin(given, env, 'migrate the ConfigMap records in namespace kubeboot', (admin) =>
    migrateRecords(admin.client, dryRun),
  );
  io.stdout.write(terminalLines(lines));
  return ExitCode.ok;
}
