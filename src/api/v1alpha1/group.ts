// Without zod: the node agent names the API group in its requests and loads nothing of the schemas.

/** The API group and version every kind in this package belongs to. */
export const GROUP = 'sandbox.remediator.io';
export const VERSION = 'v1alpha1';
