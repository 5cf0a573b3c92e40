/**
 * The edit distance of every "did you mean" (commands, configuration variables): a swap of two
 * neighbouring characters is one edit, and `nearest` keeps every candidate at the smallest distance.
 */
import t from 'tap'
import { editDistance, nearest } from '../../../src/core/edit-distance.js'

t.test('insertions, deletions, substitutions and neighbour swaps are one edit each', async (t) => {
  t.equal(editDistance('', ''), 0)
  t.equal(editDistance('serve', 'serve'), 0)
  t.equal(editDistance('', 'abc'), 3)
  t.equal(editDistance('gatway', 'gateway'), 1, 'an insertion')
  t.equal(editDistance('gateeway', 'gateway'), 1, 'a deletion')
  t.equal(editDistance('serbe', 'serve'), 1, 'a substitution')
  t.equal(editDistance('sreve', 'serve'), 1, 'a swap')
  t.equal(editDistance('porpose', 'propose'), 1, 'a swap in the middle')
  t.equal(editDistance('ca', 'abc'), 3, 'optimal string alignment: a swapped pair is not edited again')
})

t.test('nearest: the closest candidates within the limit, else those the word starts', async (t) => {
  t.same(nearest('badgs', ['badge', 'badges', 'token'], 1), ['badge', 'badges'])
  t.same(nearest('bagde', ['badge', 'badges'], 2), ['badge'], 'only the closest')
  t.same(nearest('frobnicate', ['serve', 'gateway'], 3), [])
  t.same(nearest('pol', ['policy', 'orgs'], 1), ['policy'], 'a prefix')
  t.same(nearest('p', ['policy'], 1), [], 'one character is no prefix worth naming')
})
