// The facts of a node that a pass decides on, memoised in the node's state in the policy's memory.
import type { NodeStamps } from '../../api/v1alpha1/index.js';
import type { NodeFacts } from '../../policy/node-facts.js';
import type { Clock } from '../../runtime/clock.js';
import { actionRecord } from '../../status/remediation-status.js';
import type { NodeObservation, PolicyMemory, RemediationParts } from '../policy-memory.js';
import type { Evictor } from '../remediation/evictor.js';
import type { UnreportedResults } from '../reporting/unreported.js';
import { observeNode } from './observe.js';

/** What the facts are made from besides the observation: the results no report holds yet, the last eviction. */
export interface FactsDeps {
  unreported: UnreportedResults;
  clock: Clock;
  evictor: Pick<Evictor, 'lastEvictionOn'>;
}

/**
 * The node's facts; reused while nothing they depend on changed (the same observation, the same unreported results,
 * the same dry run; a change of its remediation drops them, setRemediation) and no eviction is in flight (they
 * leave it out).
 */
export function factsOf(
  deps: FactsDeps,
  memory: PolicyMemory,
  observation: NodeObservation,
  dryRun: boolean,
  inFlight: ReadonlySet<string>,
): NodeFacts {
  const state = memory.state(observation.node.name);
  const reported = deps.unreported.changed(observation.node.name);
  const memo = state.facts;
  if (
    memo?.dryRun === dryRun &&
    memo.reported === reported &&
    memo.observation === observation &&
    inFlight.size === 0
  )
    return memo.facts;
  // Reported when their report is written: until then they count as reported at this pass (a cooldown starts no earlier).
  const now = new Date(deps.clock.now());
  const unreported = deps.unreported
    .results(observation.node.name)
    .map((result) => actionRecord(result, now, dryRun))
    .reverse();
  const facts = observeNode({
    ...observation,
    dryRun,
    evictionsInFlight: inFlight,
    lastEvictionAt: deps.evictor.lastEvictionOn(observation.node.name),
    unreported,
    simulatedStamps:
      dryRun && state.remediation?.dryRun ? { stamps: simulatedOf(state.remediation) } : undefined,
  });
  if (inFlight.size === 0) state.facts = { dryRun, reported, observation, facts };
  else delete state.facts;
  return facts;
}

/** The stamps a dry-run decision left in status alone. */
const simulatedOf = (parts: RemediationParts): NodeStamps | undefined =>
  parts.simulated ? parts.stampsAfter : undefined;
