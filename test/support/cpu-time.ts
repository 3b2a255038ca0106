/**
 * CPU milliseconds this process spent running `work` (user + system). The
 * linear-time guards bound this, not the wall clock: on a loaded CI machine
 * the wall clock grows with everyone else's work, the CPU spent here does not.
 */
export async function cpuMs(work: () => unknown): Promise<number> {
  const before = process.cpuUsage();
  await work();
  const spent = process.cpuUsage(before);
  return (spent.user + spent.system) / 1000;
}
