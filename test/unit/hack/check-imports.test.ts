// The import-circle check of make verify: strongly connected files, a file importing itself, and none in a tree.
import { expect } from 'chai';
import { circles, folderGraph } from '../../../hack/check-imports.js';

describe('check-imports: circles', () => {
  const cases: { name: string; graph: Record<string, string[]>; want: string[][] }[] = [
    { name: 'a tree has none', graph: { a: ['b', 'c'], b: ['c'], c: [] }, want: [] },
    { name: 'two files that import each other', graph: { a: ['b'], b: ['a'], c: ['a'] }, want: [['a', 'b']] },
    { name: 'a longer ring', graph: { a: ['b'], b: ['c'], c: ['a'] }, want: [['a', 'b', 'c']] },
    { name: 'a file that imports itself', graph: { a: ['a'] }, want: [['a']] },
    {
      name: 'two separate circles',
      graph: { a: ['b'], b: ['a'], c: ['d'], d: ['c'] },
      want: [
        ['a', 'b'],
        ['c', 'd'],
      ],
    },
  ];
  for (const c of cases)
    it(c.name, () => {
      const found = circles(new Map(Object.entries(c.graph)));
      expect(found.sort((x, y) => x[0]!.localeCompare(y[0]!))).to.deep.equal(c.want);
    });
});

describe('check-imports: folders', () => {
  const cases: { name: string; graph: Record<string, string[]>; want: string[][] }[] = [
    {
      name: 'files in a tree of folders: none',
      graph: { 'a/x': ['b/y', 'a/z'], 'a/z': ['c/w'], 'b/y': ['c/w'], 'c/w': [] },
      want: [],
    },
    {
      name: 'two folders that import each other through different files, no file circle',
      graph: { 'a/x': ['b/y'], 'b/z': ['a/w'], 'b/y': [], 'a/w': [] },
      want: [['a', 'b']],
    },
    {
      name: 'a folder and a subfolder that import each other',
      graph: { 'a/x': ['a/s/y'], 'a/s/z': ['a/w'], 'a/s/y': [], 'a/w': [] },
      want: [['a', 'a/s']],
    },
    {
      name: 'imports within one folder are not a circle of it',
      graph: { 'a/x': ['a/y'], 'a/y': ['a/x'] },
      want: [],
    },
  ];
  for (const c of cases)
    it(c.name, () => {
      expect(circles(folderGraph(new Map(Object.entries(c.graph))))).to.deep.equal(c.want);
    });
});
