import type { ChangeType } from './informer.js';

/**
 * Caps on the failure Events the cache keeps (issue 12): a flood of them (50,000 in a few minutes) must neither grow
 * the operator without bound nor crowd out the Events of the pods that are stuck. An Event over a cap is not stored;
 * a stored one is dropped when a change of it would go over.
 *
 * - 24 per pod: kubelet's EventCorrelator folds a pod's Events of one reason into at most 10 of their own and one
 *   that combines the rest (updated in place with the latest message); two reasons are watched, so 2 x 11, rounded
 *   up. Detection reads only the sum of their counts and the latest.
 * - 10,000 about pods the cache does not hold (not Pending, not seen yet, or no such pod): such an Event matters only
 *   if its pod shows up after it. Events about cached pods are not held to this cap, so a flood about other pods
 *   cannot crowd them out; the per-pod cap bounds them. Messages are cut to 2 KiB (MAX_FAILURE_MESSAGE_CHARS): 10,000
 *   Events took 11 MiB of heap with kubelet's messages, 27 MiB with every message at the cut (measured with
 *   test/unit/kube/event-flood.test.ts's informers), against 44 MiB for 50,000 uncapped.
 *
 * An Event is counted as its pod was when it was last admitted: one whose pod later left the cache counts as cached
 * until it changes again or the apiserver deletes it (after an hour by default).
 */
export const MAX_EVENTS_PER_POD = 24;
export const MAX_EVENTS_ABOUT_UNCACHED_PODS = 10_000;

interface AdmittedEvent {
  pod: string;
  uncached: boolean;
}

/**
 * Counts the failure Events each informer holds, to admit new ones under the caps. An informer calls its transform
 * (admit) and then reports the change, one at a time on a watch, or for a whole list first and then its changes.
 * A list that failed part way reports nothing of what it admitted: once an informer has reported a change, whatever
 * it admitted before and has not reported when it next calls admit (a list reports all of its changes in one go) was
 * never stored, and stops counting. During a list, the Events it will not find again count until it reports them
 * gone: a relist admits fewer than the caps allow, never more.
 */
export class FailureEventCaps {
  private readonly admitted = new Map<string, Map<string, AdmittedEvent>>();
  private readonly unreported = new Map<string, Set<string>>();
  private readonly stale = new Set<string>();
  private readonly perPod = new Map<string, number>();
  private uncachedCount = 0;

  /** Whether the informer `source` may hold the Event `key` about `pod` (cached: the cache holds that pod). */
  admit(source: string, key: string, pod: string, cached: boolean): boolean {
    if (this.stale.delete(source)) this.forgetUnreported(source);
    const admitted = this.admittedBy(source);
    const current = admitted.get(key);
    if (current?.pod !== pod && (this.perPod.get(pod) ?? 0) >= MAX_EVENTS_PER_POD) return false;
    if (!cached && !current?.uncached && this.uncachedCount >= MAX_EVENTS_ABOUT_UNCACHED_PODS) return false;
    if (current) this.remove(admitted, key, current);
    admitted.set(key, { pod, uncached: !cached });
    this.perPod.set(pod, (this.perPod.get(pod) ?? 0) + 1);
    if (!cached) this.uncachedCount++;
    if (!current) this.unreportedBy(source).add(key);
    return true;
  }

  /** The informer `source` stored (add, update) or dropped (delete) the Event `key`. */
  reported(source: string, type: ChangeType, key: string): void {
    const admitted = this.admittedBy(source);
    const current = admitted.get(key);
    if (type === 'delete' && current) this.remove(admitted, key, current);
    const unreported = this.unreportedBy(source);
    unreported.delete(key);
    if (unreported.size > 0) this.stale.add(source);
  }

  /** Events counted: all, and those about pods the cache did not hold. */
  get size(): { events: number; uncached: number; pods: number } {
    let events = 0;
    for (const admitted of this.admitted.values()) events += admitted.size;
    return { events, uncached: this.uncachedCount, pods: this.perPod.size };
  }

  private forgetUnreported(source: string): void {
    const admitted = this.admittedBy(source);
    for (const key of this.unreportedBy(source)) {
      const current = admitted.get(key);
      if (current) this.remove(admitted, key, current);
    }
    this.unreportedBy(source).clear();
  }

  private remove(admitted: Map<string, AdmittedEvent>, key: string, event: AdmittedEvent): void {
    admitted.delete(key);
    const left = (this.perPod.get(event.pod) ?? 0) - 1;
    if (left > 0) this.perPod.set(event.pod, left);
    else this.perPod.delete(event.pod);
    if (event.uncached) this.uncachedCount--;
  }

  private admittedBy(source: string): Map<string, AdmittedEvent> {
    let admitted = this.admitted.get(source);
    if (!admitted) this.admitted.set(source, (admitted = new Map<string, AdmittedEvent>()));
    return admitted;
  }

  private unreportedBy(source: string): Set<string> {
    let unreported = this.unreported.get(source);
    if (!unreported) this.unreported.set(source, (unreported = new Set<string>()));
    return unreported;
  }
}
