/**
 * A list read in pages (limit/continue), as client-go's pager reads one:
 * each page is handed on as it comes, so a list of any length holds one page
 * at a time. A page larger than LIST_PAGE_BYTES is asked for again with a
 * smaller limit, down to one object, which may take MAX_OBJECT_BYTES: the
 * bound is on memory per request, never on the number of objects (a
 * whole-list cap let three 1.2 MB CSRs blind the approver).
 */
import { ResponseTooLargeError } from '../errors.js';
import { MAX_OBJECT_BYTES, type KubeClient } from './client.js';
import { expectObject } from './objects.js';

/** Objects per page, as client-go's reflector asks (it pages by 500). */
export const LIST_PAGE_SIZE = 500;
/** Bytes one page may take; past it the same page is asked for with a limit eight times smaller. */
export const LIST_PAGE_BYTES = 8 << 20;

export interface PagedListOptions {
  /** The kind of the items: every page must be a `<kind>List`. */
  kind: string;
  /** Extra parameters (a fieldSelector). */
  query?: Record<string, string>;
  /** Statuses that mean there is no list to read (403, 404): listPages then returns null. */
  absentIf?: number[];
  signal?: AbortSignal;
  /** A page was too large: `limit` objects a page are asked for now. */
  onSmallerPages?: (limit: number) => void;
}

interface ListPage<T> {
  kind: string;
  metadata?: { resourceVersion?: string; continue?: string };
  items?: T[];
}

/** Hands every item of the list at `path` to `each`, page by page; returns the list's resourceVersion, or null when answered one of `absentIf`. */
export async function listPages<T>(
  client: KubeClient,
  path: string,
  opts: PagedListOptions,
  each: (item: T) => void,
): Promise<string | null> {
  let limit = LIST_PAGE_SIZE;
  let token: string | undefined;
  for (;;) {
    let page: ListPage<T>;
    try {
      const res = await client.request('GET', path, {
        query: { ...opts.query, limit, continue: token },
        maxBodyBytes: limit === 1 ? MAX_OBJECT_BYTES : LIST_PAGE_BYTES,
        accept: opts.absentIf ?? [],
        ...(opts.signal ? { signal: opts.signal } : {}),
        timeoutMs: 60_000,
      });
      if (opts.absentIf?.includes(res.status)) return null;
      page = expectObject<ListPage<T>>(res.body, `${opts.kind}List`);
    } catch (err) {
      if (!(err instanceof ResponseTooLargeError) || limit === 1) throw err;
      limit = Math.max(1, Math.floor(limit / 8));
      opts.onSmallerPages?.(limit);
      continue;
    }
    for (const item of Array.isArray(page.items) ? page.items : []) each(item);
    token = page.metadata?.continue || undefined;
    if (token === undefined) return page.metadata?.resourceVersion ?? '';
    // Small pages were needed for big objects; the ones after may be small again.
    limit = Math.min(LIST_PAGE_SIZE, limit * 2);
  }
}

/** Every item of the list at `path`; none when answered one of `absentIf`. */
export async function listAll<T>(client: KubeClient, path: string, opts: PagedListOptions): Promise<T[]> {
  const items: T[] = [];
  const resourceVersion = await listPages<T>(client, path, opts, (item) => items.push(item));
  return resourceVersion === null ? [] : items;
}
