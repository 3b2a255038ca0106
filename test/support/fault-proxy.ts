// A TCP proxy on loopback in front of the real API server that misbehaves on
// purpose: it resets the first connections (an API server restarting), then
// passes bytes through untouched (TLS end to end).
import { connect, createServer, type Socket } from 'node:net';

export interface FaultProxy {
  /** https://127.0.0.1:<port> */
  url: string;
  /** Connections accepted so far, reset or passed through. */
  connections(): number;
  close(): Promise<void>;
}

export async function startFaultProxy(target: string, opts: { resetFirst: number }): Promise<FaultProxy> {
  const { hostname, port } = new URL(target);
  let count = 0;
  const open = new Set<Socket>();
  const server = createServer((client) => {
    count++;
    open.add(client);
    client.on('close', () => open.delete(client));
    if (count <= opts.resetFirst) {
      client.resetAndDestroy();
      return;
    }
    const upstream = connect(Number(port), hostname);
    open.add(upstream);
    upstream.on('close', () => open.delete(upstream));
    client.pipe(upstream).pipe(client);
    const end = () => (client.destroy(), upstream.destroy());
    client.on('error', end);
    upstream.on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address() as { port: number };
  return {
    url: `https://127.0.0.1:${address.port}`,
    connections: () => count,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of open) s.destroy();
        server.close(() => resolve());
      }),
  };
}
