import t from 'tap'
import { AGENT_CARD_SCHEMA, validateAgentCard, type CardIssue } from '../../../src/core/agent-card.js'

function fullCard(): Record<string, unknown> {
  return {
    name: 'Invoice Helper',
    description: 'Reads invoices and answers questions about them.',
    url: 'https://agents.example.com/invoice-helper',
    version: '1.4.0',
    capabilities: { streaming: true, pushNotifications: false, stateTransitionHistory: true },
    skills: [
      {
        id: 'extract-totals',
        name: 'Extract totals',
        description: 'Finds the totals of an invoice.',
        tags: ['finance', 'invoice'],
        examples: ['What is the total of this invoice?'],
        inputModes: ['file', 'text'],
        outputModes: ['data'],
      },
      { id: 'summarize', name: 'Summarize', description: 'Summarizes an invoice.' },
    ],
    defaultInputModes: ['text'],
    defaultOutputModes: ['text', 'data'],
    provider: { organization: 'Example Corp', url: 'https://example.com', contactEmail: 'agents@example.com' },
    documentationUrl: 'https://docs.example.com/invoice-helper',
    authentication: { schemes: ['bearer', 'oauth2'], credentials: 'header' },
    supportsAuthenticatedExtendedCard: true,
    extendedCard: { url: 'https://agents.example.com/invoice-helper/extended', authentication: { schemes: ['bearer'] } },
  }
}

function codesAt(issues: CardIssue[]): string[] {
  return issues.map((i) => `${i.code} ${i.path}`)
}

t.test('the schema is the parsed v1 file', async (t) => {
  t.equal(AGENT_CARD_SCHEMA['$id'], 'https://schemas.service.local/agent-card/v1.json')
  t.equal(AGENT_CARD_SCHEMA['$schema'], 'http://json-schema.org/draft-07/schema#')
  t.ok(Object.isFrozen(AGENT_CARD_SCHEMA), 'shared schema object cannot be mutated by callers')
})

t.test('a complete valid card passes without findings', async (t) => {
  const result = validateAgentCard(fullCard())
  t.same(result, { valid: true, errors: [], warnings: [] })
})

t.test('a minimal valid card passes', async (t) => {
  const card = fullCard()
  for (const key of ['provider', 'documentationUrl', 'authentication', 'supportsAuthenticatedExtendedCard', 'extendedCard']) delete card[key]
  card['capabilities'] = { streaming: false, pushNotifications: false }
  t.equal(validateAgentCard(card).valid, true)
})

t.test('each missing required field is reported at its own path', async (t) => {
  for (const field of ['name', 'description', 'url', 'version', 'capabilities', 'skills', 'defaultInputModes', 'defaultOutputModes']) {
    const card = fullCard()
    delete card[field]
    const result = validateAgentCard(card)
    t.equal(result.valid, false, `${field} missing is invalid`)
    t.same(codesAt(result.errors), [`MISSING_REQUIRED_FIELD $.${field}`], `${field}`)
    t.match(result.errors[0]!.message, /required field/)
  }
  const nested = fullCard()
  nested['capabilities'] = { pushNotifications: true }
  nested['skills'] = [{ name: 'x', description: 'y' }]
  t.same(codesAt(validateAgentCard(nested).errors), ['MISSING_REQUIRED_FIELD $.capabilities.streaming', 'MISSING_REQUIRED_FIELD $.skills[0].id'])
})

t.test('wrong types are INVALID_TYPE with the path, and hide other findings there', async (t) => {
  const card = fullCard()
  card['name'] = 42
  card['capabilities'] = { streaming: 'yes', pushNotifications: false }
  card['skills'] = [{ id: 7, name: 'n', description: 'd' }]
  card['defaultInputModes'] = 'text'
  card['supportsAuthenticatedExtendedCard'] = 'true'
  card['url'] = 5
  const result = validateAgentCard(card)
  t.same(codesAt(result.errors), [
    'INVALID_TYPE $.capabilities.streaming',
    'INVALID_TYPE $.defaultInputModes',
    'INVALID_TYPE $.name',
    'INVALID_TYPE $.skills[0].id',
    'INVALID_TYPE $.supportsAuthenticatedExtendedCard',
    'INVALID_TYPE $.url',
  ])
  t.equal(result.errors.find((e) => e.path === '$.capabilities.streaming')?.message, '$.capabilities.streaming must be a boolean.')
})

t.test('a card that is not an object is one INVALID_TYPE at $', async (t) => {
  for (const value of [null, undefined, 'card', 3, [], [fullCard()], true]) {
    const result = validateAgentCard(value)
    t.equal(result.valid, false)
    t.same(codesAt(result.errors), ['INVALID_TYPE $'])
    t.same(result.warnings, [])
  }
})

t.test('urls', async (t) => {
  const http = fullCard()
  http['url'] = 'http://agents.example.com/x'
  t.same(codesAt(validateAgentCard(http).errors), ['INVALID_URL $.url'])
  t.match(validateAgentCard(http).errors[0]!.message, /https/)

  const notUrl = fullCard()
  notUrl['url'] = 'not a url'
  t.same(codesAt(validateAgentCard(notUrl).errors), ['INVALID_URL $.url'], 'format and pattern failures collapse to one')

  const noHost = fullCard()
  noHost['url'] = 'https://'
  t.same(codesAt(validateAgentCard(noHost).errors), ['INVALID_URL $.url'])

  const upper = fullCard()
  upper['url'] = 'HTTPS://agents.example.com/'
  t.equal(validateAgentCard(upper).valid, true, 'scheme is case-insensitive')

  const docs = fullCard()
  docs['documentationUrl'] = 'docs'
  ;(docs['provider'] as Record<string, unknown>)['url'] = '::'
  t.same(codesAt(validateAgentCard(docs).errors), ['INVALID_URL $.documentationUrl', 'INVALID_URL $.provider.url'])
})

t.test('empty values and arrays', async (t) => {
  const card = fullCard()
  card['name'] = ''
  card['version'] = ''
  card['skills'] = []
  card['defaultOutputModes'] = []
  const result = validateAgentCard(card)
  t.same(codesAt(result.errors), ['EMPTY_ARRAY $.defaultOutputModes', 'EMPTY_VALUE $.name', 'EMPTY_ARRAY $.skills', 'EMPTY_VALUE $.version'])
  t.same(result.warnings, [], 'an empty version is an error, not also a semver warning')
})

t.test('duplicate skill ids report the later occurrences', async (t) => {
  const card = fullCard()
  card['skills'] = [
    { id: 'a', name: 'A', description: 'a' },
    { id: 'b', name: 'B', description: 'b' },
    { id: 'a', name: 'A2', description: 'a2' },
    { id: 'a', name: 'A3', description: 'a3' },
  ]
  const result = validateAgentCard(card)
  t.same(codesAt(result.errors), ['DUPLICATE_SKILL_ID $.skills[2].id', 'DUPLICATE_SKILL_ID $.skills[3].id'])
  t.match(result.errors[0]!.message, /\$\.skills\[0\]/)
})

t.test('modes and schemes outside their enums', async (t) => {
  const card = fullCard()
  card['defaultInputModes'] = ['text', 'hologram']
  ;(card['skills'] as Record<string, unknown>[])[0]!['outputModes'] = [1]
  card['authentication'] = { schemes: ['basic'] }
  card['extendedCard'] = { url: 'https://x.example', authentication: { schemes: ['bearer', 'digest'] } }
  const result = validateAgentCard(card)
  t.same(codesAt(result.errors), [
    'INVALID_ENUM_VALUE $.authentication.schemes[0]',
    'INVALID_ENUM_VALUE $.defaultInputModes[1]',
    'INVALID_ENUM_VALUE $.extendedCard.authentication.schemes[1]',
    'INVALID_TYPE $.skills[0].outputModes[0]',
  ])
  t.match(result.errors[1]!.message, /text, file, image, audio, video, data/)
})

t.test('provider email format', async (t) => {
  const card = fullCard()
  ;(card['provider'] as Record<string, unknown>)['contactEmail'] = 'not-an-email'
  t.same(codesAt(validateAgentCard(card).errors), ['INVALID_FORMAT $.provider.contactEmail'])
})

t.test('warnings do not make a card invalid', async (t) => {
  const card = fullCard()
  card['version'] = 'v2'
  ;(card['skills'] as Record<string, unknown>[])[1]!['id'] = 'Summarize_Text'
  card['x-vendor'] = { a: 1 }
  card['extensions'] = []
  const result = validateAgentCard(card)
  t.equal(result.valid, true)
  t.same(result.errors, [])
  t.same(codesAt(result.warnings), [
    'UNKNOWN_FIELD $.extensions',
    'SKILL_ID_NOT_KEBAB_CASE $.skills[1].id',
    'VERSION_NOT_SEMVER $.version',
    'UNKNOWN_FIELD $["x-vendor"]',
  ])
  for (const v of ['1.0.0', '0.1.0-alpha.1', '2.3.4+build.7', '1.0.0-rc.1+sha.abc']) {
    const c = fullCard()
    c['version'] = v
    t.same(validateAgentCard(c).warnings, [], `${v} is semver`)
  }
  for (const v of ['1.0', '01.0.0', '1.0.0-']) {
    const c = fullCard()
    c['version'] = v
    t.same(codesAt(validateAgentCard(c).warnings), ['VERSION_NOT_SEMVER $.version'], `${v} is not semver`)
  }
})

t.test('prototype-pollution keys are inert and reported', async (t) => {
  const text = JSON.stringify(fullCard()).replace(
    /^\{/,
    '{"__proto__":{"polluted":true,"name":"x"},"constructor":{"prototype":{"polluted":true}},"prototype":{"polluted":true},',
  )
  const card = JSON.parse(text) as Record<string, unknown>
  card['capabilities'] = JSON.parse('{"streaming":true,"pushNotifications":true,"__proto__":{"polluted":true}}') as unknown
  const result = validateAgentCard(card)
  t.equal(result.valid, true)
  t.same(codesAt(result.warnings), ['UNKNOWN_FIELD $.__proto__', 'UNKNOWN_FIELD $.constructor', 'UNKNOWN_FIELD $.prototype'])
  t.equal(({} as Record<string, unknown>)['polluted'], undefined, 'Object.prototype untouched')
  t.equal(Object.prototype.hasOwnProperty.call(Object.prototype, 'polluted'), false)

  // a card that only inherits its fields has none of them
  const inherited = Object.create(fullCard()) as unknown
  const r2 = validateAgentCard(inherited)
  t.equal(r2.valid, false)
  t.ok(r2.errors.every((e) => e.code === 'MISSING_REQUIRED_FIELD'))
  t.equal(r2.errors.length, 8)
})

t.test('validation does not modify the card', async (t) => {
  const card = fullCard()
  delete (card['capabilities'] as Record<string, unknown>)['stateTransitionHistory']
  const before = JSON.stringify(card)
  validateAgentCard(card)
  t.equal(JSON.stringify(card), before, 'schema default is not written into the card')
})

t.test('results are deterministic and independent of key order', async (t) => {
  const bad = {
    skills: [{ id: 'X' }, { id: 'X', name: 1 }],
    url: 'ftp://x',
    zeta: 1,
    alpha: 2,
    defaultInputModes: [],
    capabilities: {},
  }
  const reversed = Object.fromEntries(Object.entries(bad).reverse())
  const a = validateAgentCard(bad)
  const b = validateAgentCard(bad)
  const c = validateAgentCard(reversed)
  t.same(a, b)
  t.same(a, c)
  t.same(codesAt(a.errors), [
    'MISSING_REQUIRED_FIELD $.capabilities.pushNotifications',
    'MISSING_REQUIRED_FIELD $.capabilities.streaming',
    'EMPTY_ARRAY $.defaultInputModes',
    'MISSING_REQUIRED_FIELD $.defaultOutputModes',
    'MISSING_REQUIRED_FIELD $.description',
    'MISSING_REQUIRED_FIELD $.name',
    'MISSING_REQUIRED_FIELD $.skills[0].description',
    'MISSING_REQUIRED_FIELD $.skills[0].name',
    'MISSING_REQUIRED_FIELD $.skills[1].description',
    'DUPLICATE_SKILL_ID $.skills[1].id',
    'INVALID_TYPE $.skills[1].name',
    'INVALID_URL $.url',
    'MISSING_REQUIRED_FIELD $.version',
  ])
  t.same(codesAt(a.warnings), ['UNKNOWN_FIELD $.alpha', 'SKILL_ID_NOT_KEBAB_CASE $.skills[0].id', 'SKILL_ID_NOT_KEBAB_CASE $.skills[1].id', 'UNKNOWN_FIELD $.zeta'])
})
