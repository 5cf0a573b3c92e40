/**
 * No silent type coercion on the admin API: every route with a JSON body schema, as the app itself
 * describes it (`/swagger/doc.json`, generated from the route schemas), gets, for every typed field at
 * any depth, each JSON value of another type (a number for a string, a string for a number or a
 * boolean, an array for an object…). Every one is 400 `invalid_request` whose message names the field
 * by its path (`body/trustLevel must be string`), and nothing in the database changes. The rest of
 * the body is valid, built from the same schema, so the wrong type is the only thing to refuse.
 * A property test then sends arbitrary JSON values of a wrong type to arbitrary fields.
 */
import t, { type Test } from 'tap'
import fc from 'fast-check'
import { createOrg, startTestAdmin, type TestAdmin, type TestResponse } from '../../helpers/admin.js'
import { expectError } from '../../helpers/expect.js'
import { startIdentityProvider } from '../../helpers/identity-provider.js'
import { propertyRuns } from '../../helpers/property-runs.js'

t.setTimeout(240_000)
// Several hundred requests from one key: the per-key limit is not what this file tests. The identity
// provider signs the webhook's bodies, so they reach the checks behind the signature.
const idp = await startIdentityProvider(t)
const admin = await startTestAdmin(t, { SERVICE_RATE_LIMIT_PER_MINUTE: '1000000', CLERK_WEBHOOK_SECRET: idp.webhookSecret })
// Organization routes check the org before validating the body: they are called in an org of their own.
const org = await createOrg(admin, 'typed-bodies')

interface Schema {
  type?: string | string[]
  enum?: unknown[]
  required?: string[]
  /** Alternatives of required members (`anyOf: [{required: [...]}, …]`): a valid value takes the first. */
  anyOf?: { required?: string[] }[]
  minProperties?: number
  properties?: Record<string, Schema>
  minimum?: number
  pattern?: string
  format?: string
  items?: Schema
}

interface BodyRoute {
  method: string
  /** The path with `{orgId}` the test org and every other parameter a well-formed id nobody holds. */
  path: string
  label: string
  schema: Schema
  /** The test org's key on its routes, else the operator key. */
  key: string
  /** The route authenticates a Svix signature over the body instead of a key. */
  signed: boolean
}

/** A typed field of a body: its JSON pointer below the body and the types its schema allows. */
interface TypedField {
  pointer: string[]
  types: string[]
}

const UNKNOWN_ID = '6f1c1a52-93a4-4f4e-9b5d-3d2d1c0b7a11'

async function bodyRoutes(): Promise<BodyRoute[]> {
  const doc = (await admin.request('GET', '/swagger/doc.json')).body as { paths: Record<string, Record<string, { parameters?: { in: string; name: string; schema?: Schema }[] }>> }
  const routes: BodyRoute[] = []
  for (const [template, operations] of Object.entries(doc.paths)) {
    for (const [method, operation] of Object.entries(operations)) {
      const schema = operation.parameters?.find((p) => p.in === 'body')?.schema
      if (schema === undefined) continue
      const inOrg = template.includes('{orgId}')
      const path = template.replace('{orgId}', org.orgId).replace(/\{[^}]+\}/g, UNKNOWN_ID)
      const signed = operation.parameters?.some((p) => p.in === 'header' && p.name === 'svix-signature') === true
      routes.push({ method: method.toUpperCase(), path, label: `${method.toUpperCase()} ${template}`, schema, key: inOrg ? org.key : admin.operatorKey, signed })
    }
  }
  return routes
}

const typesOf = (schema: Schema): string[] => (schema.type === undefined ? [] : Array.isArray(schema.type) ? schema.type : [schema.type])

/** The JSON type of a value, in JSON Schema's words (an integral number is an integer and a number). */
function jsonTypes(value: unknown): string[] {
  if (value === null) return ['null']
  if (Array.isArray(value)) return ['array']
  if (typeof value === 'number') return Number.isInteger(value) ? ['integer', 'number'] : ['number']
  return [typeof value]
}

const wrongFor = (types: readonly string[]) => (value: unknown): boolean => !jsonTypes(value).some((type) => types.includes(type))

/**
 * A value the schema accepts: the first enum value, or a small value of its first type; an object has
 * every required member, and more members up to minProperties.
 */
function validValue(schema: Schema, where: string): unknown {
  if (schema.enum !== undefined) return schema.enum[0]
  const type = typesOf(schema).find((candidate) => candidate !== 'null')
  switch (type) {
    case 'string': {
      if (schema.format === 'date-time') return '2026-01-01T00:00:00.000Z'
      if (schema.format === 'uuid') return '0b6e7f2a-1c3d-4e5f-8a9b-0c1d2e3f4a5b'
      // A plain word, else a UUID (agent ids); another pattern needs a candidate of its own here.
      const text = ['x', '0b6e7f2a-1c3d-4e5f-8a9b-0c1d2e3f4a5b'].find((candidate) => schema.pattern === undefined || new RegExp(schema.pattern, 'u').test(candidate))
      if (text === undefined) throw new Error(`${where}: a required string with pattern ${schema.pattern}; teach validValue a value for it`)
      return text
    }
    case 'integer':
    case 'number':
      return Math.max(schema.minimum ?? 1, 1)
    case 'boolean':
      return true
    case 'array':
      return []
    case 'object':
    case undefined: {
      const value: Record<string, unknown> = {}
      const required = [...(schema.required ?? []), ...(schema.anyOf?.[0]?.required ?? [])]
      const optional = Object.keys(schema.properties ?? {}).filter((name) => !required.includes(name))
      const names = [...required, ...optional.slice(0, Math.max(0, (schema.minProperties ?? 0) - required.length))]
      for (const name of names) value[name] = validValue(schema.properties?.[name] ?? {}, `${where}/${name}`)
      return value
    }
    default:
      throw new Error(`${where}: unexpected type ${type}`)
  }
}

/** Every field with a declared type, at any depth of nested object schemas. */
function typedFields(schema: Schema, pointer: string[] = []): TypedField[] {
  const fields: TypedField[] = []
  for (const [name, property] of Object.entries(schema.properties ?? {})) {
    const here = [...pointer, name]
    const types = typesOf(property)
    if (types.length > 0) fields.push({ pointer: here, types })
    if (property.properties !== undefined) fields.push(...typedFields(property, here))
  }
  return fields
}

/** A valid body with the value at `pointer` replaced (the objects on the way are made valid too). */
function bodyWith(schema: Schema, pointer: readonly string[], value: unknown): Record<string, unknown> {
  const body = validValue(schema, 'body') as Record<string, unknown>
  let node = body
  let nodeSchema = schema
  for (const name of pointer.slice(0, -1)) {
    nodeSchema = nodeSchema.properties?.[name] ?? {}
    const existing = node[name]
    node[name] = typeof existing === 'object' && existing !== null && !Array.isArray(existing) ? existing : validValue(nodeSchema, name)
    node = node[name] as Record<string, unknown>
  }
  node[pointer[pointer.length - 1] as string] = value
  return body
}

/**
 * Every row of every table of the test database, hashed: any insert, update or delete changes it. The audit
 * trail's tables are left out: a signed-in caller's refused write is recorded there on purpose (docs/audit.md).
 */
async function databaseFingerprint(target: TestAdmin): Promise<string> {
  const tables = await target.database.db.query<{ name: string }>(
    `SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' AND table_name NOT LIKE 'audit\\_%' ORDER BY 1`,
  )
  const parts: string[] = []
  for (const { name } of tables) {
    const rows = await target.database.db.query<{ digest: string | null }>(`SELECT md5(string_agg(r::text, '|' ORDER BY r::text)) AS digest FROM "${name}" r`)
    parts.push(`${name}:${rows[0]?.digest ?? 'empty'}`)
  }
  return parts.join(',')
}

/** Sends `body` the way the route authenticates: with its key, or signed by the identity provider. */
function send(route: BodyRoute, body: unknown): Promise<TestResponse> {
  if (!route.signed) return admin.request(route.method, route.path, { key: route.key, body })
  const delivery = idp.signWebhook(body)
  return admin.request(route.method, route.path, { key: null, rawBody: delivery.body, headers: delivery.headers })
}

const escapeRegExp = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')

async function expectRefused(t: Test, route: BodyRoute, field: TypedField, value: unknown): Promise<void> {
  const label = `${route.label} ${field.pointer.join('.')} = ${JSON.stringify(value)}`
  const res = await send(route, bodyWith(route.schema, field.pointer, value))
  expectError(t, res, 400, 'invalid_request', label)
  t.match(String(res.body?.message), new RegExp(`^body/${escapeRegExp(field.pointer.join('/'))} must be `), `${label}: the message names the field`)
}

const routes = await bodyRoutes()
/** One value of each JSON type, integral and fractional numbers apart. */
const SAMPLES: readonly unknown[] = ['4', 4, 2.5, true, null, ['4'], { value: '4' }]

t.test('the app describes its body routes, and each has typed fields', async (t) => {
  const labels = routes.map((r) => r.label)
  for (const expected of ['POST /v1/agents', 'PUT /v1/agents/{id}/trust-level', 'POST /v1/agents/{id}/badge', 'POST /v1/orgs/{orgId}/groups']) {
    t.ok(labels.includes(expected), `${expected} is among them`)
  }
  t.ok(routes.length >= 20, `${routes.length} routes with a JSON body schema`)
  for (const route of routes) t.ok(typedFields(route.schema).length > 0, `${route.label} has typed fields`)
})

t.test('every typed field of every body route refuses every value of another JSON type, by name, writing nothing', async (t) => {
  let cases = 0
  for (const route of routes) {
    // The valid body itself must get past validation, or a refusal would prove nothing about the field.
    const control = await send(route, validValue(route.schema, 'body'))
    t.notOk(control.status === 400 && /^body[/ ]/.test(String(control.body?.message)), `${route.label}: the base body passes validation (${control.status} ${control.body?.error ?? ''})`)
    const fingerprint = await databaseFingerprint(admin)
    for (const field of typedFields(route.schema)) {
      for (const value of SAMPLES.filter(wrongFor(field.types))) {
        await expectRefused(t, route, field, value)
        cases++
      }
    }
    t.equal(await databaseFingerprint(admin), fingerprint, `${route.label}: nothing written by its refusals`)
  }
  t.comment(`${cases} wrong-typed values on ${routes.length} routes`)
  t.ok(cases > 100, 'a meaningful number of cases')
})

t.test('trustLevel as a JSON number is refused on both routes that take it', async (t) => {
  const created = await admin.request('POST', '/v1/agents', { body: { name: 'typed', domain: 'typed.example.com' } })
  t.equal(created.status, 201)
  const id = created.body.data.id as string
  const before = await databaseFingerprint(admin)
  for (const [method, path, body] of [
    ['PUT', `/v1/agents/${id}/trust-level`, { trustLevel: 4 }],
    ['POST', `/v1/agents/${id}/badge`, { domain: 'typed.example.com', trustLevel: 1 }],
  ] as const) {
    const res = await admin.request(method, path, { body })
    expectError(t, res, 400, 'invalid_request', `${method} ${path}`)
    t.match(res.body?.message, /^body\/trustLevel must be string/, 'names trustLevel')
  }
  t.equal(await databaseFingerprint(admin), before, 'no level set, no badge issued')
  t.equal((await admin.request('PUT', `/v1/agents/${id}/trust-level`, { body: { trustLevel: '4' } })).status, 200, 'the string "4" is accepted')
})

t.test('property: any JSON value of a wrong type in any typed field is refused by name', async (t) => {
  const cases = routes.flatMap((route) => typedFields(route.schema).map((field) => ({ route, field })))
  const before = await databaseFingerprint(admin)
  await fc.assert(
    fc.asyncProperty(
      fc.constantFrom(...cases).chain(({ route, field }) => fc.record({
        route: fc.constant(route),
        field: fc.constant(field),
        // JSON only (what a client can send), and no __proto__ keys, which the parser refuses for another reason.
        value: fc.jsonValue({ maxDepth: 2 }).filter((v) => wrongFor(field.types)(v) && !/__proto__|constructor/.test(JSON.stringify(v))),
      })),
      async ({ route, field, value }) => {
        const res = await send(route, bodyWith(route.schema, field.pointer, value))
        const pointer = `body/${field.pointer.join('/')} must be `
        return res.status === 400 && res.body?.error === 'invalid_request' && String(res.body?.message).startsWith(pointer)
      },
    ),
    propertyRuns(300),
  )
  t.equal(await databaseFingerprint(admin), before, 'nothing written')
})
