// Module hooks for interleaving tests: dist/fs/*.js get ./pause-fs.mjs in place of node:fs.
const WRAP = new URL('./pause-fs.mjs', import.meta.url).href;
export async function resolve(specifier, context, next) {
  if ((specifier === 'node:fs' || specifier === 'fs') && context.parentURL?.includes('/dist/fs/')) return { url: WRAP, shortCircuit: true };
  return next(specifier, context);
}
