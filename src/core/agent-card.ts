/**
 * Agent Card validation (docs/api.md §2.13). The JSON Schema in `schemas/agent-card/v1.json` is the single source of
 * the card's shape (the admin plane also serves it); this module turns ajv's findings into stable codes with
 * JSON paths, and adds the rules a schema cannot express (unique skill ids) plus advisory warnings.
 * Pure: the schema is read once at module load, validation never writes to the card.
 */
import { Ajv, type ErrorObject } from 'ajv'
import { addFormats, loadSchema } from './json-schema.js'
import { compareSegments, formatPath, pointerToSegments, type Segment } from './json-path.js'
import { isRecord } from './json-objects.js'

/** One problem found in a card: a stable code, where (`$`-rooted JSON path) and a sentence for humans. */
export interface CardIssue {
  code: string
  path: string
  message: string
}

/** Result of {@link validateAgentCard}: `valid` is false exactly when `errors` is non-empty. */
export interface CardValidation {
  valid: boolean
  errors: CardIssue[]
  warnings: CardIssue[]
}

/** The Agent Card JSON Schema v1, parsed from `schemas/agent-card/v1.json` and frozen. */
export const AGENT_CARD_SCHEMA: Readonly<Record<string, unknown>> = loadSchema('agent-card', 'v1.json')

// ownProperties: a card whose prototype carries `name` (or anything else) must not count as having it.
// No useDefaults / coerceTypes / removeAdditional: those write into the data, and validation must only read.
const ajv = new Ajv({ allErrors: true, ownProperties: true, strict: true })
addFormats(ajv)
const validateSchema = ajv.compile(AGENT_CARD_SCHEMA)

const KNOWN_TOP_LEVEL = new Set(Object.keys(AGENT_CARD_SCHEMA['properties'] as Record<string, unknown>))
const KEBAB_CASE = /^[a-z0-9]+(?:-[a-z0-9]+)*$/
// Semantic Versioning 2.0.0 §2, §9, §10: MAJOR.MINOR.PATCH, optional pre-release and build metadata,
// no leading zeros in numeric identifiers.
const SEMVER =
  /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$/

function hasOwn(value: object, key: string): boolean {
  return Object.prototype.hasOwnProperty.call(value, key)
}



const TYPE_NAMES: ReadonlyMap<string, string> = new Map([
  ['string', 'a string'],
  ['boolean', 'a boolean'],
  ['object', 'an object'],
  ['array', 'an array'],
  ['number', 'a number'],
  ['integer', 'an integer'],
])

function describeType(type: unknown): string {
  return typeof type === 'string' ? (TYPE_NAMES.get(type) ?? type) : String(type)
}

// Order of findings that share a path: the most fundamental problem first, so a reader fixes causes
// before symptoms.
const CODE_RANK: Record<string, number> = {
  INVALID_TYPE: 0,
  MISSING_REQUIRED_FIELD: 1,
  EMPTY_VALUE: 2,
  EMPTY_ARRAY: 3,
  INVALID_ENUM_VALUE: 4,
  INVALID_URL: 5,
  INVALID_FORMAT: 6,
  DUPLICATE_SKILL_ID: 7,
}

function describeAjvError(error: ErrorObject, segments: readonly Segment[]): CardIssue {
  const path = formatPath(segments)
  switch (error.keyword) {
    case 'required':
      // `segments` already ends with the missing field (see mapAjvError)
      return { code: 'MISSING_REQUIRED_FIELD', path, message: `The required field ${path} is missing.` }
    case 'type':
      return {
        code: 'INVALID_TYPE',
        path,
        message: `${path} must be ${describeType((error.params as { type: unknown }).type)}.`,
      }
    case 'minLength':
      return { code: 'EMPTY_VALUE', path, message: `${path} must not be empty.` }
    case 'minItems':
      return { code: 'EMPTY_ARRAY', path, message: `${path} must contain at least one item.` }
    case 'enum': {
      const allowed = (error.params as { allowedValues: unknown[] }).allowedValues.map((v) => String(v)).join(', ')
      return { code: 'INVALID_ENUM_VALUE', path, message: `${path} must be one of: ${allowed}.` }
    }
    case 'format': {
      const format = String((error.params as { format: string }).format)
      if (format === 'uri') return { code: 'INVALID_URL', path, message: `${path} must be an absolute URL.` }
      if (format === 'email') return { code: 'INVALID_FORMAT', path, message: `${path} must be an email address.` }
      return { code: 'INVALID_FORMAT', path, message: `${path} must be a valid ${format}.` }
    }
    case 'pattern':
      // the only pattern in the schema is the agent URL's https requirement
      if (error.schemaPath === '#/properties/url/pattern') {
        return { code: 'INVALID_URL', path, message: `${path} must be an https:// URL with a host.` }
      }
      return { code: 'INVALID_FORMAT', path, message: `${path} has an invalid format.` }
    default:
      return { code: 'INVALID_VALUE', path, message: `${path} is not valid.` }
  }
}

interface Located extends CardIssue {
  segments: Segment[]
}

function mapAjvError(error: ErrorObject, card: unknown): Located {
  const segments = pointerToSegments(error.instancePath, card)
  // ajv reports a missing member at its parent; the issue belongs at the member's own path
  if (error.keyword === 'required') segments.push(String((error.params as { missingProperty: string }).missingProperty))
  return { ...describeAjvError(error, segments), segments }
}


function sortIssues(issues: Located[]): CardIssue[] {
  return issues
    .sort(
      (a, b) =>
        compareSegments(a.segments, b.segments) ||
        (CODE_RANK[a.code] ?? 99) - (CODE_RANK[b.code] ?? 99) ||
        (a.code < b.code ? -1 : a.code > b.code ? 1 : 0) ||
        (a.message < b.message ? -1 : a.message > b.message ? 1 : 0),
    )
    .map(({ code, path, message }) => ({ code, path, message }))
}

/**
 * Validates an Agent Card (docs/api.md §2.13). Errors make the card invalid; warnings (non-kebab-case skill ids,
 * non-semver version, unknown top-level fields) are advice only. Findings are sorted by path, so the same
 * card always yields the same result. Never writes to `card`.
 */
export function validateAgentCard(card: unknown): CardValidation {
  if (!isRecord(card)) {
    const kind = card === null || card === undefined ? String(card) : Array.isArray(card) ? 'an array' : `a ${typeof card}`
    return {
      valid: false,
      errors: [{ code: 'INVALID_TYPE', path: '$', message: `The agent card must be a JSON object, not ${kind}.` }],
      warnings: [],
    }
  }

  const errors: Located[] = []
  const seen = new Set<string>()
  const add = (list: Located[], issue: CardIssue, segments: Segment[]): void => {
    const key = `${issue.code}\u0000${issue.path}`
    if (seen.has(key)) return
    seen.add(key)
    list.push({ ...issue, segments })
  }

  if (!validateSchema(card)) {
    const mapped = (validateSchema.errors ?? []).map((error) => mapAjvError(error, card))
    // a wrong type at a path hides the other keyword failures there (they all follow from it)
    const typed = new Set(mapped.filter((m) => m.code === 'INVALID_TYPE').map((m) => m.path))
    for (const { segments, ...issue } of mapped) {
      if (issue.code !== 'INVALID_TYPE' && typed.has(issue.path)) continue
      add(errors, issue, segments)
    }
  }

  const warnings: Located[] = []
  const skills = hasOwn(card, 'skills') ? card['skills'] : undefined
  if (Array.isArray(skills)) {
    const firstIndex = new Map<string, number>()
    skills.forEach((skill: unknown, index) => {
      if (!isRecord(skill) || !hasOwn(skill, 'id')) return
      const id = skill['id']
      if (typeof id !== 'string' || id.length === 0) return
      const segments: Segment[] = ['skills', index, 'id']
      const path = formatPath(segments)
      const first = firstIndex.get(id)
      if (first === undefined) {
        firstIndex.set(id, index)
      } else {
        add(
          errors,
          {
            code: 'DUPLICATE_SKILL_ID',
            path,
            message: `Skill id ${JSON.stringify(id)} is already used by $.skills[${first}]; skill ids must be unique.`,
          },
          segments,
        )
      }
      if (!KEBAB_CASE.test(id)) {
        add(
          warnings,
          { code: 'SKILL_ID_NOT_KEBAB_CASE', path, message: `Skill id ${JSON.stringify(id)} is not kebab-case (for example "summarize-text").` },
          segments,
        )
      }
    })
  }

  const version = hasOwn(card, 'version') ? card['version'] : undefined
  if (typeof version === 'string' && version.length > 0 && !SEMVER.test(version)) {
    add(
      warnings,
      { code: 'VERSION_NOT_SEMVER', path: '$.version', message: `Version ${JSON.stringify(version)} is not a semantic version (for example "1.2.0").` },
      ['version'],
    )
  }

  // Object.keys lists own keys only, including a JSON-parsed "__proto__", which is reported like any other
  // unknown member and never used to index anything but the card itself.
  for (const key of Object.keys(card)) {
    if (KNOWN_TOP_LEVEL.has(key)) continue
    const segments: Segment[] = [key]
    const path = formatPath(segments)
    add(warnings, { code: 'UNKNOWN_FIELD', path, message: `Field ${path} is not part of the Agent Card v1 schema and is ignored.` }, segments)
  }

  const sortedErrors = sortIssues(errors)
  return { valid: sortedErrors.length === 0, errors: sortedErrors, warnings: sortIssues(warnings) }
}
