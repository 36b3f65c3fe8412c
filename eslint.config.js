// @ts-check
import eslint from '@eslint/js';
import prettier from 'eslint-config-prettier';
import tseslint from 'typescript-eslint';

/**
 * One no-restricted-imports rule for a layer (a later block for the same files replaces an earlier one's rule, so each
 * block says all of it): client-node and the lifecycle library unless `clientNode` (src/kube alone), and the given
 * patterns.
 * @param {string[]} files
 * @param {{ ignores?: string[]; clientNode: boolean; patterns?: string[] }} options
 */
function layer(files, { ignores, clientNode, patterns = [] }) {
  const paths = clientNode ? [] : ['@kubernetes/client-node', '@dot-i/k8s-operator'];
  return [
    {
      files,
      ...(ignores ? { ignores } : {}),
      rules: { 'no-restricted-imports': ['error', { paths, patterns }] },
    },
  ];
}

/** The top folders of src/. */
const FOLDERS = [
  'actuation',
  'agent',
  'api',
  'cleanup',
  'cli',
  'controllers',
  'detection',
  'diagnose',
  'kube',
  'observability',
  'policy',
  'ports',
  'runtime',
  'signals',
  'status',
  'webhook',
];

/**
 * The folders of src/controllers/, outermost ring first: the manager wires everything; the policy reconciler and the
 * orphan sweep hand their plans to apply; apply carries them out through the concerns; remediation claims a node's
 * lease before it fences it.
 */
export const CONTROLLER_RINGS = [
  ['manager'],
  ['orphans', 'sandboxpolicy'],
  ['apply'],
  ['iolimits', 'nodecondition', 'pacing', 'reporting', 'rollouts'],
  ['remediation'],
  ['leases'],
];

/**
 * Import patterns for every folder of src/ but `folder` and the ones it may import.
 * @param {string} folder
 * @param {string[]} allowed
 */
const outside = (folder, ...allowed) =>
  FOLDERS.filter((f) => f !== folder && !allowed.includes(f)).map((f) => `**/${f}/**`);

export default tseslint.config(
  {
    ignores: [
      'dist/',
      'coverage/',
      'node_modules/',
      '.cluster/',
      '.cluster-*/',
      '.lab/',
      '.image/',
      'scratch/',
      'eslint.config.js',
      '**/*.cjs',
    ],
  },
  eslint.configs.recommended,
  ...tseslint.configs.strictTypeChecked,
  {
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/restrict-template-expressions': [
        'error',
        { allowNumber: true, allowBoolean: true },
      ],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      // client-node's models are classes that its own docs fill with object literals.
      '@typescript-eslint/no-unsafe-class-instance-assignment': 'off',
    },
  },
  {
    // Chai's property assertions (expect(x).to.be.true) read as unused expressions.
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: {
      '@typescript-eslint/no-unused-expressions': 'off',
      '@typescript-eslint/no-non-null-assertion': 'off',
    },
  },
  // The layering rule from STYLE.md: arrows point inward. Only src/kube touches client-node; the pure core touches no
  // effects; the ports, the signals and the adapters never reach up into the controllers that use them.
  ...layer(['src/**/*.ts'], { ignores: ['src/kube/**'], clientNode: false }),
  ...layer(['src/kube/**/*.ts'], { clientNode: true, patterns: ['**/controllers/**', '**/cli/**'] }),
  // The controllers and what they are built on reach the adapters (kube/) only through the ports: a failure is read
  // through ports/errors, never through client-node's types.
  ...layer(['src/controllers/**/*.ts'], { clientNode: false, patterns: ['**/cli/**', '**/kube/**'] }),
  // Inside the controllers, rings too: a folder imports only the folders of the rings below its own, and the files at
  // the root of controllers/ (the policy memory, node assignment, the action log, failures) import none.
  ...CONTROLLER_RINGS.flatMap((ring, i) =>
    ring.flatMap((folder) =>
      layer([`src/controllers/${folder}/**/*.ts`], {
        clientNode: false,
        patterns: [
          '**/cli/**',
          '**/kube/**',
          ...CONTROLLER_RINGS.slice(0, i + 1)
            .flat()
            .filter((f) => f !== folder)
            .map((f) => `**/${f}/**`),
        ],
      }),
    ),
  ),
  ...layer(['src/controllers/*.ts'], {
    clientNode: false,
    patterns: ['**/cli/**', '**/kube/**', ...CONTROLLER_RINGS.flat().map((f) => `**/${f}/**`)],
  }),
  ...layer(['src/signals/**/*.ts', 'src/status/**/*.ts', 'src/actuation/**/*.ts'], {
    clientNode: false,
    patterns: ['**/controllers/**', '**/cli/**', '**/kube/**'],
  }),
  ...layer(['src/ports/**/*.ts'], {
    clientNode: false,
    patterns: [
      '**/controllers/**',
      '**/cli/**',
      '**/kube/**',
      '**/runtime/**',
      '**/status/**',
      '**/actuation/**',
    ],
  }),
  ...layer(['src/detection/**/*.ts', 'src/policy/**/*.ts'], {
    clientNode: false,
    patterns: [
      '**/controllers/**',
      '**/kube/**',
      '**/runtime/**',
      '**/actuation/**',
      '**/status/**',
      'node:fs',
      'node:http*',
      'node:net',
    ],
  }),
  // The peers of the controllers that the CLI composes: the uninstall's plan and runner, the on-call diagnosis, and the
  // pacing webhook. None reaches into the controllers or the adapters (kube/); they work through the ports.
  ...layer(['src/cleanup/**/*.ts', 'src/diagnose/**/*.ts'], {
    clientNode: false,
    patterns: ['**/agent/**', '**/controllers/**', '**/cli/**', '**/kube/**', '**/runtime/**'],
  }),
  ...layer(['src/webhook/**/*.ts'], {
    clientNode: false,
    patterns: [
      '**/agent/**',
      '**/controllers/**',
      '**/cli/**',
      '**/cleanup/**',
      '**/diagnose/**',
      '**/kube/**',
    ],
  }),
  // The node agent: the API's types, its metrics and the IO readers it shares with the operator's sources.
  ...layer(['src/agent/**/*.ts'], {
    clientNode: false,
    patterns: outside('agent', 'api', 'observability', 'signals'),
  }),
  // The innermost rings: the queue, the fence and the clocks; logs and metrics; the API's types. Each imports nothing
  // of src/ outside itself.
  ...layer(['src/runtime/**/*.ts'], { clientNode: false, patterns: outside('runtime') }),
  ...layer(['src/observability/**/*.ts'], { clientNode: false, patterns: outside('observability') }),
  ...layer(['src/api/**/*.ts'], { clientNode: false, patterns: outside('api') }),
  prettier,
);
