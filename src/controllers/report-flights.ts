import { randomBytes } from 'node:crypto';
import type { SandboxHealthStatus } from '../api/v1alpha1/index.js';
import type { ActionResult } from '../status/remediation-status.js';

/** A write of a node's SandboxHealth under way. */
export interface Flight {
  /** The reportId it gives the status. */
  id: string;
  /** Its place among the node's writes: a later one that landed holds what this one wrote. */
  seq: number;
  /** What it leaves in the status once landed (of the keys we write), its reportId with it. */
  expected: SandboxHealthStatus;
  /** The results it tells: a write that follows it does not tell them again. */
  told: readonly ActionResult[];
}

/**
 * The Reporter's SandboxHealth writes in flight, by node: one, or two when the second follows the first, fenced on the
 * reportId the first gives the status (ADR 0026), so that the API lands it right after the first or not at all. Each
 * write is named apart from every other this process makes; which landed last is known by its place, as answers can
 * come back out of order.
 */
export class ReportFlights {
  /** Each node's writes in flight, oldest first. */
  private readonly flights = new Map<string, Flight[]>();
  /** The latest of a node's writes that landed while another flew (its seq): one older that lands after it stands for nothing. */
  private readonly newest = new Map<string, number>();
  /** Nodes where a write was refused for going before the one it follows: looked at again once none is in flight. */
  private readonly refused = new Set<string>();
  private readonly prefix = randomBytes(4).toString('hex');
  private sequence = 0;

  /** The node's latest write in flight: a report planned now follows it. */
  latest(node: string): Flight | undefined {
    return this.flights.get(node)?.at(-1);
  }

  /** Whether a report of the node may go now beside its write in flight (one in flight, and none refused since). */
  mayFollow(node: string): boolean {
    return this.flights.get(node)?.length === 1 && !this.refused.has(node);
  }

  /** A write of the node under way, leaving `expected` (and its reportId) and telling `told`. */
  fly(node: string, expected: SandboxHealthStatus, told: readonly ActionResult[]): Flight {
    const id = this.nextId();
    const flight = { id, seq: this.sequence, expected: { ...expected, reportId: id }, told };
    this.flights.set(node, [...(this.flights.get(node) ?? []), flight]);
    return flight;
  }

  /** The write is sent again, whole, under a new name: a write that followed it was planned on what it replaced. */
  rename(flight: Flight, expected: SandboxHealthStatus): void {
    flight.id = this.nextId();
    flight.expected = { ...expected, reportId: flight.id };
  }

  /** The write is back (`landed`, or not): whether it is the latest of the node's to land, the one that stands. */
  back(node: string, flight: Flight, landed: boolean): boolean {
    const left = (this.flights.get(node) ?? []).filter((f) => f !== flight);
    const latest = landed && flight.seq > (this.newest.get(node) ?? 0);
    if (left.length === 0) {
      this.flights.delete(node);
      this.newest.delete(node);
    } else {
      this.flights.set(node, left);
      if (latest) this.newest.set(node, flight.seq);
    }
    return latest;
  }

  /** The API refused the node's write for arriving before the one it follows. */
  refuse(node: string): void {
    this.refused.add(node);
  }

  /** Once no write of the node flies: whether one was refused, so that the node is looked at again (asked once). */
  lookAgain(node: string): boolean {
    return this.refused.delete(node);
  }

  private nextId(): string {
    return `${this.prefix}-${++this.sequence}`;
  }
}
