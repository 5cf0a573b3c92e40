/**
 * The canonical resource URI against WHATWG URL (the parser the MCP SDK's server resolves `params.uri`
 * with): the spellings of one resource have one canonical form, that form reads back as itself, and a text
 * the SDK cannot resolve has none.
 */
import t from 'tap'
import assert from 'node:assert/strict'
import fc from 'fast-check'
import { canonicalResourceUri, canonicalUriTemplate } from '../../../src/core/resource-uri.js'
import { propertyRuns } from '../../helpers/property-runs.js'

const href = (text: string): string | null => {
  try {
    return new URL(text).href
  } catch {
    return null
  }
}

t.test('the spellings of file:///secret.md share one canonical form', async (t) => {
  for (const spelling of [
    'file:///secret.md', 'file:///./secret.md', 'FILE:///secret.md', 'file:/secret.md', 'file://localhost/secret.md', 'file:///x/../secret.md',
    'file:///x/%2E%2e/secret.md', 'file:///sec\tret.md', 'file:///secret.md\r\n', ' file:///secret.md', 'file:\\\\\\secret.md', 'file:///%73ecret.md',
    'file:///%73%65%63%72%65%74.md',
  ]) {
    t.equal(canonicalResourceUri(spelling), 'file:///secret.md', JSON.stringify(spelling))
  }
  t.equal(canonicalResourceUri('HTTPS://Example.COM:443/a/./b/../c'), 'https://example.com/a/c', 'special scheme: host lower-cased, default port dropped')
  t.equal(canonicalResourceUri('memo://Box/a/../notes'), 'memo://Box/notes', 'another scheme keeps its host as written, as the SDK does')
  t.equal(canonicalResourceUri('file:///a%2fb%c3%a9'), 'file:///a%2Fb%C3%A9', 'reserved and non-ASCII escapes stay, upper-cased')
  for (const bad of ['', 'not a url', 'file', '//x/y', 'http://exa mple.com/', 'http://[::1/']) t.equal(canonicalResourceUri(bad), null, JSON.stringify(bad))
})

t.test('templates are canonical in their literal text, expressions kept', async (t) => {
  t.equal(canonicalUriTemplate('FILE:///secret{suffix}'), 'file:///secret{suffix}')
  t.equal(canonicalUriTemplate('file://localhost/docs/./{name}{?q}'), 'file:///docs/{name}{?q}')
  t.equal(canonicalUriTemplate('{+uri}'), null, 'no literal URL to canonicalise')
  t.equal(canonicalUriTemplate('file:///readme.md'), 'file:///readme.md')
})

const piece = fc.constantFrom('file', 'FILE', 'http', 'HtTp', 'memo', ':', '/', '\\', '//', '.', '..', '%2e', '%2E', '%41', '%7e', '%2f', '%zz', '?', '#', '@', 'a', 'B', ' ', '\t', '\n', 'localhost', 'é', '[', ']', '{x}')

t.test('property: the canonical form is a WHATWG serialisation that reads back as itself, and one spelling of the SDK\'s resolution', async (t) => {
  await fc.assert(fc.property(fc.array(piece, { maxLength: 12 }).map((parts) => parts.join('')), (raw) => {
    const canonical = canonicalResourceUri(raw)
    const resolved = href(raw)
    if (resolved === null) {
      assert.equal(canonical, null, 'what the SDK cannot resolve has no canonical form')
      return
    }
    if (canonical === null) return
    assert.equal(href(canonical), canonical, 'the SDK resolves the canonical form to itself')
    assert.equal(canonicalResourceUri(canonical), canonical, 'canonical twice is canonical once')
    assert.equal(canonicalResourceUri(resolved), canonical, 'the SDK\'s resolution has the same canonical form')
  }), propertyRuns(2000))
  t.pass('held')
})
