// Kept-alive connections to the apiserver. client-node 1.x builds a new https.Agent, and so a new TLS connection,
// for every request: a third of the operator's busy CPU at 1,000 nodes went to handshakes (docs/adr/0025). Here
// each lane has one agent for the credentials in use; new credentials get a new agent, and the old one is drained.
import { createHash } from 'node:crypto';
import type { Socket } from 'node:net';
import { Agent as HttpsAgent, type AgentOptions } from 'node:https';
import type { TLSSocket } from 'node:tls';

/**
 * Requests, watches and the leader Lease each have their own sockets: a burst of writes cannot queue a Lease
 * renewal behind it, and a watch holds its connection for minutes without taking one from the requests.
 */
export type Lane = 'requests' | 'watches' | 'lease';

/**
 * How long a connection may sit idle before we close it. kube-apiserver closes its own after 90 s (IdleTimeout
 * in k8s.io/apiserver's secure serving); closing ours first means a request never goes out on a connection the
 * apiserver is closing at that moment, which is the one race a kept-alive client cannot otherwise rule out.
 */
export const IDLE_EXPIRY_MS = 30_000;

const LANE_LIMITS: Record<Lane, { maxSockets: number; maxFreeSockets: number }> = {
  // Writes run with bounded concurrency anyway (the queues); this bounds what a burst can open at once.
  requests: { maxSockets: 64, maxFreeSockets: 16 },
  // One connection per open watch, however many informers there are.
  watches: { maxSockets: Infinity, maxFreeSockets: 4 },
  // Renewals are one at a time; a second socket is for a renewal that must not wait for a stalled one.
  lease: { maxSockets: 2, maxFreeSockets: 1 },
};

export interface PoolOptions {
  /** How long a connection may sit idle before it is closed: IDLE_EXPIRY_MS unless a test says otherwise. */
  idleMs?: number;
  /** A TLS handshake completed on a new connection; `resumed` when it reused an earlier session's keys. */
  onHandshake?(lane: Lane, resumed: boolean): void;
}

/** An https.Agent of one lane and one set of credentials, which knows its pool. */
export class PooledAgent extends HttpsAgent {
  private drained = false;
  /** When each socket last went idle: a socket with no entry has not carried a request yet. */
  private readonly freedAt = new WeakMap<Socket, number>();

  constructor(
    readonly lane: Lane,
    /** A digest of the credentials this agent's connections were opened with. */
    readonly credentials: string,
    /** The TLS options as client-node built them, to open a sibling lane with the same credentials. */
    readonly tls: AgentOptions,
    readonly authorization: string | undefined,
    private readonly pool: ConnectionPool,
    idleMs: number,
  ) {
    super({ ...tls, ...LANE_LIMITS[lane], keepAlive: true, timeout: idleMs, scheduling: 'lifo' });
    // After the agent's own listener, which may have handed the socket to a queued request already: that request
    // still finds it recorded (its 'socket' event comes on the next tick) as a socket that has carried one before.
    this.on('free', (socket: Socket) => {
      this.freedAt.set(socket, Date.now());
    });
  }

  /**
   * How long `socket` sat idle before the request now on it, or undefined when it is new (this is its first). Node's
   * own req.reusedSocket misses a socket handed straight from one request to a queued one.
   */
  idleFor(socket: Socket): number | undefined {
    const at = this.freedAt.get(socket);
    return at === undefined ? undefined : Date.now() - at;
  }

  /**
   * Closes the idle connections: after one of them was found dead, the others (as old or older, LIFO) are likely
   * dead too, and a replay must go out on a new one.
   */
  dropIdle(): void {
    for (const sockets of Object.values(this.freeSockets))
      for (const socket of sockets ?? []) socket.destroy();
  }

  /** The agent of another lane for the same credentials. */
  inLane(lane: Lane): PooledAgent {
    return this.pool.agent(lane, this.tls, this.authorization);
  }

  get isDrained(): boolean {
    return this.drained;
  }

  /**
   * Closes the idle connections now and each busy one once its answer is read: nothing in flight is cut, and no
   * request of the new credentials goes out on a connection opened with the old. (A request of the old ones that
   * was already queued in this agent still goes out, on an old connection, with the credentials it was built with.)
   */
  drain(): void {
    this.drained = true;
    this.keepSocketAlive = () => false;
    for (const sockets of Object.values(this.freeSockets))
      for (const socket of sockets ?? []) socket.destroy();
  }

  override createConnection(...args: Parameters<HttpsAgent['createConnection']>): Socket {
    const socket = super.createConnection(...args) as TLSSocket;
    socket.once('secureConnect', () => {
      this.pool.handshake(this.lane, socket.isSessionReused());
    });
    return socket;
  }
}

/** The agents of one KubeConfig: for each lane, the one of the credentials last used. */
export class ConnectionPool {
  private readonly current = new Map<Lane, PooledAgent>();

  constructor(private readonly options: PoolOptions = {}) {}

  /**
   * The agent for `lane` and these credentials (TLS options as client-node builds them per request, and the
   * Authorization header). Credentials other than the lane's current ones (a rotated client certificate or
   * token) get a new agent, and the previous one is drained.
   */
  agent(lane: Lane, tls: AgentOptions, authorization: string | undefined): PooledAgent {
    const credentials = digest(tls, authorization);
    const current = this.current.get(lane);
    if (current?.credentials === credentials) return current;
    current?.drain();
    const fresh = new PooledAgent(
      lane,
      credentials,
      tls,
      authorization,
      this,
      this.options.idleMs ?? IDLE_EXPIRY_MS,
    );
    this.current.set(lane, fresh);
    return fresh;
  }

  handshake(lane: Lane, resumed: boolean): void {
    try {
      this.options.onHandshake?.(lane, resumed);
    } catch {
      // A metrics hook must never fail the connection it observes.
    }
  }
}

/** Everything that decides who a connection authenticates as and whom it trusts, as one digest. */
function digest(tls: AgentOptions, authorization: string | undefined): string {
  const hash = createHash('sha256');
  const parts: unknown[] = [
    tls.ca,
    tls.cert,
    tls.key,
    tls.pfx,
    tls.passphrase,
    tls.servername,
    tls.rejectUnauthorized,
    authorization,
  ];
  for (const part of parts) {
    for (const value of [part].flat()) {
      if (typeof value === 'string' || Buffer.isBuffer(value)) hash.update(value);
      else hash.update(JSON.stringify(value ?? null));
      hash.update('\0');
    }
    hash.update('\x01');
  }
  return hash.digest('hex');
}
