#!/usr/bin/env node
// Builds the operator console (docs/console.md "Front-end stack"): console/src → dist/console/ with one
// JS bundle and one stylesheet, content-hashed under assets/, and an index.html that loads them. No inline
// script or style (the console's CSP forbids both), nothing fetched from the network, at build or run time.
// Run by `npm run build` after tsc; `--watch` is not offered on purpose: the build takes well under a second.
import { build } from 'esbuild'
import { mkdirSync, rmSync, writeFileSync, renameSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const out = path.join(root, 'dist', 'console')
const assets = path.join(out, 'assets')

// Only what this script owns: tsc writes the pure modules the unit tests import under dist/console/src/.
rmSync(assets, { recursive: true, force: true })
mkdirSync(assets, { recursive: true })

const result = await build({
  absWorkingDir: root,
  entryPoints: { app: 'console/src/main.tsx' },
  bundle: true,
  outdir: assets,
  entryNames: '[name]-[hash]',
  assetNames: '[name]-[hash]',
  format: 'esm',
  platform: 'browser',
  target: ['es2020', 'chrome100', 'firefox100', 'safari15'],
  jsx: 'automatic',
  jsxImportSource: 'preact',
  minify: true,
  sourcemap: false,
  legalComments: 'none',
  metafile: true,
  logLevel: 'warning',
  define: { 'process.env.NODE_ENV': '"production"' },
})

const outputs = Object.keys(result.metafile.outputs).map((file) => path.relative(assets, path.join(root, file)))
const js = outputs.filter((file) => file.endsWith('.js'))
const css = outputs.filter((file) => file.endsWith('.css'))
if (js.length !== 1 || css.length !== 1) throw new Error(`expected one JS and one CSS output, got ${outputs.join(', ')}`)

const html = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>Agent trust console</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/console/assets/${css[0]}">
<script type="module" src="/console/assets/${js[0]}"></script>
</head>
<body>
<div id="app"></div>
<noscript>The operator console needs JavaScript.</noscript>
</body>
</html>
`
// index.html last and by rename, so a running appliance never serves a page naming assets not yet written.
writeFileSync(path.join(out, 'index.html.tmp'), html)
renameSync(path.join(out, 'index.html.tmp'), path.join(out, 'index.html'))
console.log(`console built: dist/console/index.html, assets/${js[0]}, assets/${css[0]}`)
