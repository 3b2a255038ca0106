/**
 * Waits for a condition in unit tests that drive code on a fake clock: the
 * probe is asked again after every turn of the event loop, so the code under
 * test runs its promise chains in between. Not a sleep: no time passes but
 * what the code itself takes.
 */
export async function until(what: string, probe: () => boolean | Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const end = performance.now() + timeoutMs;
  while (performance.now() < end) {
    if (await probe()) return;
    await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error(`never saw: ${what}`);
}
