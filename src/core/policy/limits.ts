// Apart from the grammar so the gateway's evaluator reads them without loading the YAML parser. Why these
// values: docs/policy-limits.md.
import { MAX_DID_LENGTH } from '../did.js'

export const MAX_PATTERN_BYTES = 1024
export const MAX_PATTERN_SEGMENTS = 32
/** `*` and `**` segments together; a method `*` is not counted. */
export const MAX_PATTERN_WILDCARDS = 8
/** With one `**` a match never searches along the path; a second would make it search. */
export const MAX_PATTERN_DOUBLE_STARS = 1
/** In each of `rate_limits`, `operations`, `mcp_tools` and `capability_classes`. */
export const MAX_RULES_PER_LIST = 256
export const MAX_RULES_PER_DOCUMENT = 512
export const MAX_POLICY_DID_BYTES = MAX_DID_LENGTH
export const MAX_TOOL_NAME_BYTES = 128
export const MAX_CAPABILITY_CLASS_BYTES = 128
