/**
 * A new node's version floor, seeded at its join. A node with no floor (0)
 * takes any statement a CA it trusts signed, as long as the statement has not
 * expired: after a `retire`, whoever may write kube-public/cluster-info could
 * put back the statement of a step before it (old + new CA, signed by the new
 * one) and a node joining then would re-adopt the retired CA. So the
 * statement cluster-info carries beside the CA the node joins with, read over
 * TLS verified against that CA (kube/discovery.ts), is its first floor: every
 * statement published before it is then refused as replayed.
 *
 * Only a statement for exactly the bundle the node now trusts seeds: one for
 * another bundle (the node pinned one CA of a rotation in progress) is the
 * one the node still has to follow, so it must stay newer than the floor.
 */
import path from 'node:path';
import type { Logger } from '../log.js';
import type { Store } from '../store/store.js';
import { trustedBundle } from './bundle.js';
import { statementFor, verifyStatement } from './statement.js';

/** In the state directory: the CA keeper's bookkeeping (trust/keeper.ts), the floor among it. */
export const STATE_FILE = 'ca-rotation.json';

export interface AcceptedStatement {
  version: number;
  bundle: string;
  signerPin: string | null;
}

export interface SeedInput {
  store: Store;
  stateDir: string;
  logger: Logger;
  /** The CA bundle the node trusts from its join on. */
  caPem: string;
  /** The statement published beside it. */
  signed: { payload: string | null; jws: string | null };
  now: Date;
}

/** Records the statement as the node's floor when it is valid for `caPem` and above the floor recorded; returns the floor now. */
export async function seedFloor(input: SeedInput): Promise<number | null> {
  const file = path.join(input.stateDir, STATE_FILE);
  let state: Record<string, unknown> = {};
  try {
    const text = await input.store.read(file);
    if (text) state = JSON.parse(text) as Record<string, unknown>;
  } catch {
    state = {};
  }
  if (typeof state !== 'object' || state === null || Array.isArray(state)) state = {};
  const recorded = (state.accepted as AcceptedStatement | null | undefined)?.version ?? 0;
  let bundle;
  try {
    bundle = trustedBundle(input.caPem);
  } catch {
    return null;
  }
  const check = statementFor(verifyStatement({ signed: input.signed, trusted: bundle, now: input.now }), bundle.hash, recorded);
  if (!check.ok) {
    if (check.problem !== 'unsigned' && check.problem !== 'replayed' && check.problem !== 'signature-mismatch')
      input.logger.warn(`CA rotation: not starting the version floor at join: ${check.message}`);
    return recorded || null;
  }
  const { version, signerPin } = check.statement;
  const accepted: AcceptedStatement = { version, bundle: bundle.hash, signerPin };
  await input.store.write(file, JSON.stringify({ restarted: {}, pending: {}, signer: null, ...state, accepted }));
  input.logger.info(
    `CA rotation: trust statement version ${version} (signed by ${check.signedBy}) published with the CA joined with; statements published before it are refused from now on`,
  );
  return version;
}
