/**
 * One writer at a time over the node's files: issuance stores a credential
 * and its kubeconfig as one unit, and so does a CA rewrite (trust/keeper.ts);
 * a worker gives both the same serializer.
 */
export function serializer(): <T>(fn: () => Promise<T>) => Promise<T> {
  let tail: Promise<unknown> = Promise.resolve();
  return <T>(fn: () => Promise<T>): Promise<T> => {
    const run = tail.then(fn, fn);
    tail = run.catch(() => undefined);
    return run;
  };
}
