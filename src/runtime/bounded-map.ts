/**
 * A Map that keeps its `max` most recently set entries: setting a key makes it the newest, and the oldest goes once
 * there are more. For memos and bookkeeping whose keys come and go with the cluster, so nothing grows without end.
 */
export class BoundedMap<K, V> extends Map<K, V> {
  constructor(private readonly max: number) {
    super();
  }

  override set(key: K, value: V): this {
    super.delete(key);
    super.set(key, value);
    if (this.size > this.max) super.delete(this.keys().next().value as K);
    return this;
  }
}
