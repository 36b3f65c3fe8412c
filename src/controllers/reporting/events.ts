import type { Logger } from '../../observability/log.js';
import { describeError } from '../../ports/errors.js';
import type { EventRecorder, Transition } from '../../ports/writes.js';

const FOLLOWED = new Set(['SandboxCreationStuck', 'SandboxCreationDegraded', 'IoPressureHigh']);

/** Records one transition of a report as an Event; the ones an SRE follows are logged too. */
export async function recordEvent(
  deps: { logger: Logger; recorder: EventRecorder },
  policy: string,
  node: string,
  transition: Transition,
): Promise<void> {
  const { logger, recorder } = deps;
  if (FOLLOWED.has(transition.reason) || transition.reason.endsWith('Recovered')) {
    logger.info(transition.reason === 'SandboxCreationStuck' ? 'Detected stuck Pod' : 'Changed Node state', {
      policy,
      node,
      ...(transition.target.kind === 'Pod'
        ? { pod: `${transition.target.namespace}/${transition.target.name}` }
        : {}),
      reason: transition.reason,
      message: transition.message,
    });
  }
  try {
    await recorder.record(transition);
  } catch (err) {
    // The status holds what happened; a lost Event is logged, not retried (the transition will not repeat).
    logger.warn('Failed to record an Event', {
      policy,
      node,
      reason: transition.reason,
      error: describeError(err),
    });
  }
}
