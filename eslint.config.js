// @ts-check
import eslint from '@eslint/js';
import prettier from 'eslint-config-prettier';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: ['dist/', 'coverage/', 'node_modules/', '.cluster/', 'scratch/', 'eslint.config.js', '**/*.cjs'],
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
  {
    // The layering rule from STYLE.md: only src/kube touches client-node; the pure core touches no effects.
    files: ['src/**/*.ts'],
    ignores: ['src/kube/**'],
    rules: {
      'no-restricted-imports': ['error', { paths: ['@kubernetes/client-node', '@dot-i/k8s-operator'] }],
    },
  },
  {
    files: ['src/detection/**/*.ts', 'src/policy/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: ['@kubernetes/client-node', '@dot-i/k8s-operator'],
          patterns: ['**/kube/**', '**/runtime/**', '**/actuation/**', 'node:fs', 'node:http*', 'node:net'],
        },
      ],
    },
  },
  prettier,
);
