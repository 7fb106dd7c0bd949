// Builds lib/index.js (the host half, an ES module DSH imports) and lib/client.js (the web half,
// wrapped for DSH Web's module loader) with esbuild. Type-checking is `pnpm typecheck` (tsc);
// esbuild only strips the types.
import { readFile } from 'node:fs/promises'
import { rm } from 'node:fs/promises'
import { build } from 'esbuild'

const pkg = JSON.parse(await readFile(new URL('../package.json', import.meta.url), 'utf8'))
process.chdir(new URL('..', import.meta.url).pathname)
await rm('lib', { recursive: true, force: true })

await build({
  entryPoints: ['src/index.ts'],
  bundle: true,
  format: 'esm',
  platform: 'node',
  target: 'node22',
  outfile: 'lib/index.js',
  logLevel: 'warning',
})

// DSH Web loads a client module as `window.__ModuleLoader__.load({id, factory})`; the factory's
// `require` hands out DSH Web's own React (dsh-client-modules), so React stays external.
await build({
  entryPoints: ['src/client/index.ts'],
  bundle: true,
  format: 'cjs',
  platform: 'browser',
  target: 'es2022',
  outfile: 'lib/client.js',
  external: ['react'],
  logLevel: 'warning',
  banner: {
    js: `window.__ModuleLoader__.load({ id: ${JSON.stringify(pkg.name)}, factory: (require) => {\n` +
      'var module = { exports: {} }; var exports = module.exports;',
  },
  footer: { js: 'return module.exports; } });' },
})
console.log(`built ${pkg.name} ${pkg.version}: lib/index.js, lib/client.js`)
