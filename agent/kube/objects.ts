/**
 * Names that came from the API server (a requester's node name, a CSR's
 * metadata.name) are untrusted text. They become a path segment only when
 * they are one, and an object read back is used only when it is the kind and
 * name asked for: `GET /api/v1/nodes/` (the node name `.` after URL
 * normalisation) answers 200 with the NodeList, which must never pass for a
 * Node.
 */
import { UnexpectedObjectError } from '../errors.js';

/** matches apimachinery's IsValidPathSegmentName: what the API server accepts as one name in a path. */
export function pathSegmentProblem(name: string): string | null {
  if (name === '') return 'is empty';
  if (name === '.' || name === '..') return `may not be '${name}'`;
  if (name.includes('/') || name.includes('%')) return "may not contain '/' or '%'";
  return null;
}

/** `<collection>/<name>`, refusing a name that would address anything else. */
export function objectPath(collection: string, name: string): string {
  const problem = pathSegmentProblem(name);
  if (problem !== null) throw new UnexpectedObjectError(`refusing to build a path under ${collection}: the name ${problem}`);
  return `${collection}/${encodeURIComponent(name)}`;
}

export interface ObjectMeta {
  kind?: string;
  metadata?: { name?: string; [field: string]: unknown };
}

/**
 * The body as the object asked for, or an error naming what came instead.
 * `name` undefined checks only the kind (a list).
 */
export function expectObject<T extends ObjectMeta>(body: unknown, kind: string, name?: string): T {
  const object = (typeof body === 'object' && body !== null ? body : {}) as ObjectMeta;
  if (object.kind !== kind)
    throw new UnexpectedObjectError(`expected a ${kind}, the API server answered a ${String(object.kind ?? typeof body).slice(0, 64)}`);
  if (name !== undefined && object.metadata?.name !== name)
    throw new UnexpectedObjectError(`expected ${kind} ${JSON.stringify(name.slice(0, 253))}, the API server answered another name`);
  return object as T;
}
