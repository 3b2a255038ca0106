/**
 * What `kubeboot approver --inventory` says of its inventory record on
 * /readyz and at start: whether it exists and how many nodes it lists,
 * looked at again at most once a minute. Ready either way: without it the
 * approver still decides kube-proxy CSRs and refuses the kubelet's, naming why.
 *
 * The read is the caller's (the record's spec.nodes, null when there is none).
 */
import type { Clock } from '../time/clock.js';
import { INVENTORY_REF } from './inventory.js';

/** How long a look stands before /readyz's detail looks again. */
const LOOK_EVERY_MS = 60_000;

export interface InventorySeen {
  ok: boolean;
  text: string;
}

export interface InventoryStatus {
  /** Reads the inventory now. */
  look(): Promise<InventorySeen>;
  /** The line for /readyz: the last look, and another started in the background when it is a minute old. */
  detail(): string;
}

export function inventoryStatus(read: () => Promise<Record<string, string> | null>, clock: Clock): InventoryStatus {
  let last: { at: number; text: string } | null = null;
  const look = async (): Promise<InventorySeen> => {
    let seen: InventorySeen;
    try {
      const nodes = await read();
      seen =
        nodes === null
          ? { ok: false, text: `missing: no kubelet client or serving CSR is approved until ${INVENTORY_REF} exists` }
          : { ok: true, text: `${Object.keys(nodes).length} node(s) listed` };
    } catch (err) {
      seen = { ok: false, text: `could not read ${INVENTORY_REF}: ${(err as Error).message}` };
    }
    last = { at: clock.monotonic(), text: seen.text };
    return seen;
  };
  return {
    look,
    detail: () => {
      if (last === null || clock.monotonic() - last.at >= LOOK_EVERY_MS) void look();
      return `inventory ${INVENTORY_REF}: ${last?.text ?? 'not looked at yet'}`;
    },
  };
}
