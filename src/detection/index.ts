export * from './types.js';
export * from './classify.js';
export * from './stuck-pods.js';
export * from './node-findings.js';
export * from './runtime-version.js';
export * from './owners.js';
