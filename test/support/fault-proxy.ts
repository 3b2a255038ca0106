// A TCP proxy on loopback in front of the real API server that misbehaves on
// purpose: it resets the first connections (an API server restarting), or
// goes silent without closing anything (a partition, a hung middlebox), and
// otherwise passes bytes through untouched (TLS end to end).
import { connect, createServer, type Socket } from 'node:net';

export interface FaultProxy {
  /** https://127.0.0.1:<port> */
  url: string;
  /** Connections accepted so far, reset or passed through. */
  connections(): number;
  /**
   * From now on no byte moves on any connection, open or new, and none is
   * closed: what a client sees when the network drops its packets. Returns
   * performance.now() at the moment it took effect.
   */
  silence(): number;
  /** New connections pass again; the silenced ones stay silent until close(). */
  heal(): void;
  close(): Promise<void>;
}

export async function startFaultProxy(target: string, opts: { resetFirst?: number } = {}): Promise<FaultProxy> {
  const { hostname, port } = new URL(target);
  let count = 0;
  let silent = false;
  const open = new Set<Socket>();
  const pairs = new Set<{ client: Socket; upstream: Socket }>();
  const track = (s: Socket) => {
    open.add(s);
    s.on('close', () => open.delete(s));
  };
  /** Stops forwarding: unpiped and paused, so the bytes sit unread in the kernel and nothing is answered. */
  const hush = (pair: { client: Socket; upstream: Socket }) => {
    pair.client.unpipe(pair.upstream);
    pair.upstream.unpipe(pair.client);
    pair.client.pause();
    pair.upstream.pause();
  };
  const server = createServer((client) => {
    count++;
    track(client);
    if (count <= (opts.resetFirst ?? 0)) {
      client.resetAndDestroy();
      return;
    }
    if (silent) {
      // Accepted by the kernel, never answered: the TLS handshake hangs.
      client.pause();
      return;
    }
    const upstream = connect(Number(port), hostname);
    track(upstream);
    const pair = { client, upstream };
    pairs.add(pair);
    client.pipe(upstream).pipe(client);
    const end = () => (pairs.delete(pair), client.destroy(), upstream.destroy());
    client.on('error', end);
    upstream.on('error', end);
    client.on('close', end);
    upstream.on('close', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address() as { port: number };
  return {
    url: `https://127.0.0.1:${address.port}`,
    connections: () => count,
    silence() {
      silent = true;
      for (const pair of pairs) hush(pair);
      return performance.now();
    },
    heal() {
      silent = false;
      pairs.clear();
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of open) s.destroy();
        server.close(() => resolve());
      }),
  };
}
