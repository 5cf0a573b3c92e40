/**
 * What the operator commands print: columns aligned under upper-case headers, label-value lists, and
 * registry text with its control characters escaped, so a hostile name cannot drive the terminal.
 */
import t from 'tap'
import { clean, cleanBlock, fields, table } from '../../../src/cli/output.js'

t.test('clean: one line, controls escaped, empty values as -', async (t) => {
  t.equal(clean('acme\u001b[2J'), 'acme\\x1b[2J', 'ESC escaped')
  t.equal(clean('a\nb\u009b'), 'a\\x0ab\\x9b', 'newline and a C1 control escaped')
  t.equal(clean(null), '-')
  t.equal(clean(undefined), '-')
  t.equal(clean(''), '-')
  t.equal(clean(3), '3')
  t.equal(clean(['x', 'y']), '["x","y"]', 'objects as JSON')
  t.equal(cleanBlock('a: 1\n\tb: "\u001b"\n'), 'a: 1\n\tb: "\\x1b"\n', 'a block keeps its lines and tabs')
})

t.test('table and fields', async (t) => {
  const rows = [{ id: 'a1', name: 'weather-bot', domain: null }, { id: 'b22', name: 'x', domain: 'x.example.com' }]
  t.equal(table(rows, [['id', (r) => r.id], ['name', (r) => r.name], ['domain', (r) => r.domain]]), [
    'ID   NAME         DOMAIN',
    'a1   weather-bot  -',
    'b22  x            x.example.com',
    '',
  ].join('\n'))
  t.equal(fields([['id', 'a1'], ['trust level', '2'], ['reason', null]]), 'id           a1\ntrust level  2\nreason       -\n')
})
