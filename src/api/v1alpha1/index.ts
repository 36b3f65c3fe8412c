export * from './meta.js';
export * from './sandbox-policy.js';
export * from './sandbox-health.js';
export * from './io-attribution.js';
export * from './resources.js';
export * from './validation.js';
export * from './stamps.js';
export * from './node-condition.js';
