/**
 * Size limits of a policy document, re-exported by the grammar module. They live apart from it so the
 * evaluator, which runs in the gateway, can read them without loading the YAML parser and the schema.
 * Every limit is far above what a hand-written policy needs and low enough that the work of matching one
 * request against a whole document stays a small multiple of the request path's length.
 */
import { MAX_DID_LENGTH } from '../did.js'

/** Longest operation pattern, in UTF-8 bytes (the pattern alphabet is ASCII, so also characters). */
export const MAX_PATTERN_BYTES = 1024

/** Most path segments (or dotted name segments) in one operation pattern, wildcards included. */
export const MAX_PATTERN_SEGMENTS = 32

/** Most wildcard segments (`*` and `**` together) in one operation pattern; a method `*` is not counted. */
export const MAX_PATTERN_WILDCARDS = 8

/**
 * Most `**` segments in one operation pattern. With one, matching is a comparison of the fixed segments
 * before it with the start of the path and of those after it with the end, whatever the path's length; a
 * second `**` would make the segments between them a block to search for along the whole path.
 */
export const MAX_PATTERN_DOUBLE_STARS = 1

/** Most entries in each of `rate_limits`, `operations`, `mcp_tools` and `capability_classes`. */
export const MAX_RULES_PER_LIST = 256

/** Most entries in those four lists together. */
export const MAX_RULES_PER_DOCUMENT = 512

/** Longest DID anywhere in a policy, in bytes (DID syntax is ASCII): the registry's own DID limit. */
export const MAX_POLICY_DID_BYTES = MAX_DID_LENGTH

/** Longest MCP tool name, in UTF-8 bytes. */
export const MAX_TOOL_NAME_BYTES = 128

/** Longest capability class, in bytes (class syntax is ASCII). */
export const MAX_CAPABILITY_CLASS_BYTES = 128
