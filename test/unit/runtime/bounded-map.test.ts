import { expect } from 'chai';
import { BoundedMap } from '../../../src/runtime/bounded-map.js';

describe('BoundedMap', () => {
  it('keeps the most recently set entries, and a key set again counts as new', () => {
    const map = new BoundedMap<string, number>(2);
    map.set('a', 1).set('b', 2).set('a', 3).set('c', 4);
    expect([...map.entries()]).to.deep.equal([
      ['a', 3],
      ['c', 4],
    ]);
  });
});
