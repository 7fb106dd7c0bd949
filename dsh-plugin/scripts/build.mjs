// Builds lib/index.js (the host half, an ES module DSH imports) and lib/client.js (the web half,
// wrapped for DSH Web's module loader) with esbuild. Type-checking is `pnpm typecheck` (tsc);
// esbuild only strips the types.
//
// `node scripts/build.mjs [OUT_DIR]`: OUT_DIR (default lib) is where the two files go; the build
// check (scripts/build-dsh-plugin.sh check) builds into a temporary one and compares it with the
// committed lib/. The output depends only on the sources and the lockfile's esbuild, not on
// OUT_DIR or the clone's path (paths in it are relative to this package), so a fresh clone
// rebuilds lib/ byte for byte.
import { readFile, rm } from 'node:fs/promises'
import { join, resolve } from 'node:path'
import { build } from 'esbuild'

const pkg = JSON.parse(await readFile(new URL('../package.json', import.meta.url), 'utf8'))
// OUT_DIR relative to where the command runs; the default, lib/, is this package's own.
const outDir = process.argv[2] === undefined ? undefined : resolve(process.argv[2])
process.chdir(new URL('..', import.meta.url).pathname)
const out = outDir ?? 'lib'
await rm(out, { recursive: true, force: true })

await build({
  entryPoints: ['src/index.ts'],
  bundle: true,
  format: 'esm',
  platform: 'node',
  target: 'node22',
  outfile: join(out, 'index.js'),
  logLevel: 'warning',
})

// DSH Web loads a client module as `window.__ModuleLoader__.load({id, factory})`; the factory's
// `require` hands out DSH Web's own React and UI primitives (dsh-client-modules' seed), so they stay
// external.
await build({
  entryPoints: ['src/client/index.ts'],
  bundle: true,
  format: 'cjs',
  platform: 'browser',
  target: 'es2022',
  outfile: join(out, 'client.js'),
  external: ['react', '@deepseek-ai/dsh-client-ui-primitives'],
  logLevel: 'warning',
  banner: {
    js: `window.__ModuleLoader__.load({ id: ${JSON.stringify(pkg.name)}, factory: (require) => {\n` +
      'var module = { exports: {} }; var exports = module.exports;',
  },
  footer: { js: 'return module.exports; } });' },
})
if (process.argv[2] === undefined) console.log(`built ${pkg.name} ${pkg.version}: lib/index.js, lib/client.js`)
