/** A node change the apiserver refused for what it is (400/422): not sent again as it is. */
interface RefusedChange {
  /** The node's resourceVersion it was refused on, or the one a write of ours moved it to since. */
  version: string | undefined;
  /** The policy's generation it was decided on. */
  generation: number;
  message: string;
}

/**
 * A policy's node changes the apiserver refused for what it is, by node: node patching owns them. One is not sent
 * again until the node changes (another's write) or the policy does; the operator's own writes of the node (its
 * condition) move the version along without lifting it.
 */
export class RefusedChanges {
  private readonly nodes = new Map<string, RefusedChange>();

  /** Why a change of the node decided on this version and generation is not sent; undefined when it may be. */
  refusal(node: string, version: string | undefined, generation: number): string | undefined {
    const refused = this.nodes.get(node);
    return refused && refused.version === version && refused.generation === generation
      ? refused.message
      : undefined;
  }

  refuse(node: string, version: string | undefined, generation: number, message: string): void {
    this.nodes.set(node, { version, generation, message });
  }

  /** A write of ours moved the node to `version`: a refusal stands, as no one else changed the node. */
  movedByUs(node: string, version: string | undefined): void {
    const refused = this.nodes.get(node);
    if (refused && version) refused.version = version;
  }
}
