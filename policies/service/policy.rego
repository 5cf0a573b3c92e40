# The service PDP decision (docs/wire-contract.md §8) for OPA users: the same decision as the gateway's built-in
# evaluator (src/core/policy/evaluate.ts). policies/decision-vectors.json is the contract for both; a
# change to one of them needs the same change in the other and a vector that shows it.
#
# Input: the PDP request of docs/api.md §2.12 (pip_version "service.pip.v1", subject, action, resource,
# context, environment). The MCP tool of a request is input.action.mcp_tool when it is a non-empty
# string, otherwise input.resource.identifier when input.action.operation is "mcp.tool.call". On an MCP
# message input.action.http_operation ("METHOD /path") names the HTTP request that carried it.
#
# Data (the bundle of docs/wire-contract.md §8):
#   data.resolved_policies.by_agent_did[<did>]  the agent's resolved (merged) policy
#   data.config                                 the org policy; used for a DID without an entry
# With neither present the policy is {} and restricts nothing, exactly as the built-in evaluator
# does with an empty resolved policy. Absent fields are read as "not set", so data.config may be the
# org's resolved map or its raw policy document.
#
# Output (POST <opa>/v1/data/service/policy answers {"result": {...}}): decision, reason, obligations
# and ttl, and required_trust_level on a DENY for the trust level. Everything else is a function, so it
# stays out of the result. There is no decision_id rule:
# the id comes from OPA (the "decision_id" field of the data API response when decision logging is
# on) or from the caller, and the vector table does not compare it.
#
# Functions that need more than one definition are written as else-chains: OPA rejects a second
# definition of a rule or function declared with :=.
package service.policy

import rego.v1

# ALLOW exactly when no check failed. The enforcement mode in input.context is not consulted: modes
# are applied by the gateway.
decision := "ALLOW" if {
	reason == "allowed"
} else := "DENY"

# The first failing check, or "allowed".
reason := first_failure(effective_policy(input))

# On ALLOW only (a DENY leaves nothing to enforce): a rate_limit.apply obligation for the subject's
# budget, then one for the subject's budget on the request's MCP tool.
obligations := array.concat(subject_rate_limit(policy), mcp_tool_rate_limit(policy)) if {
	decision == "ALLOW"
	policy := effective_policy(input)
} else := []

# Seconds a PEP may cache the decision; a DENY is never cached.
ttl := 60 if {
	decision == "ALLOW"
} else := 0

# On a DENY for the trust level (a reason ending in trust_level_below_minimum): the minimum of the check
# that failed, when it is one of the five codes, so a gateway can tell an OAuth client which level to
# ask for. Undefined otherwise, which leaves the member out of the result.
required_trust_level := minimum if {
	endswith(reason, "trust_level_below_minimum")
	minimum := object.get(failing_rule(effective_policy(input)), "min_trust_level", null)
	minimum in {"SS", "REG", "DV", "OV", "EV"}
}

effective_policy(request) := policy if {
	policy := data.resolved_policies.by_agent_did[request.subject.did]
	is_object(policy)
} else := policy if {
	policy := data.config
	is_object(policy)
} else := {}

# The checks in their fixed order; the first failure is the reason:
#   1. policy-wide: denied_did, not_in_allow_list, trust_level_below_minimum;
#   1b. any operation rule whose pattern is over a structural limit: operation_pattern_over_limit;
#   1c. any MCP tool rule whose pattern has more than 8 "*": mcp_tool_pattern_over_limit;
#   2. the most specific operation rule matching input.action.http_operation, then the one matching
#      input.action.operation: operation_<check>;
#   3. the most specific rule matching the MCP tool of the request: mcp_tool_<check>;
#   4. the most specific class rule covering input.action.capability_class: capability_class_<check>;
#   5. the most specific class rule covering input.context.leaf_capability: leaf_capability_<check>.
# A stage whose rule does not exist is skipped. Rules only add restrictions on top of stage 1.
first_failure(policy) := failure if {
	failure := failed_check(policy)
} else := "operation_pattern_over_limit" if {
	some rule in list_field(policy, "operations")
	pattern_over_limit(rule.pattern)
} else := "mcp_tool_pattern_over_limit" if {
	some rule in list_field(policy, "mcp_tools")
	tool_pattern_over_limit(rule.tool)
} else := failure if {
	failure := concat("", ["operation_", failed_check(operation_rule(policy, input.action.http_operation))])
} else := failure if {
	failure := concat("", ["operation_", failed_check(operation_rule(policy, input.action.operation))])
} else := failure if {
	failure := concat("", ["mcp_tool_", failed_check(mcp_tool_rule(policy))])
} else := failure if {
	failure := concat("", ["capability_class_", failed_check(class_rule(policy, input.action.capability_class))])
} else := failure if {
	failure := concat("", ["leaf_capability_", failed_check(class_rule(policy, input.context.leaf_capability))])
} else := "allowed"

# The policy or rule whose check decided the reason, tried in the order of first_failure. The pattern
# limits are not repeated: when one of them decides, the reason is not a trust-level one.
failing_rule(policy) := policy if {
	failed_check(policy)
} else := rule if {
	rule := operation_rule(policy, input.action.http_operation)
	failed_check(rule)
} else := rule if {
	rule := operation_rule(policy, input.action.operation)
	failed_check(rule)
} else := rule if {
	rule := mcp_tool_rule(policy)
	failed_check(rule)
} else := rule if {
	rule := class_rule(policy, input.action.capability_class)
	failed_check(rule)
} else := rule if {
	rule := class_rule(policy, input.context.leaf_capability)
	failed_check(rule)
}

# The three checks of a policy or a rule, in order: a denial beats an allow-list entry; an allow-list
# that is present and not null restricts ([] lets nobody in); then the minimum trust level.
failed_check(rule) := "denied_did" if {
	input.subject.did in list_field(rule, "denied_dids")
} else := "not_in_allow_list" if {
	allowed := object.get(rule, "allowed_dids", null)
	allowed != null
	not allow_list_contains_subject(allowed)
} else := "trust_level_below_minimum" if {
	below_minimum(object.get(rule, "min_trust_level", null))
}

# Anything but an array holding the subject fails the allow-list, so a malformed list fails closed.
allow_list_contains_subject(allowed) if {
	is_array(allowed)
	input.subject.did in allowed
}

# A list field; [] when absent or not a list.
list_field(object_value, key) := value if {
	value := object.get(object_value, key, [])
	is_array(value)
} else := []

# null and "" mean no minimum. A subject level outside SS..EV (including "") meets no minimum and an
# unknown minimum is met by nobody, because the rank lookup is then undefined.
below_minimum(minimum) if {
	not no_minimum(minimum)
	not meets_minimum(minimum)
}

no_minimum(minimum) if {
	minimum == null
}

no_minimum(minimum) if {
	minimum == ""
}

meets_minimum(minimum) if {
	rank := {"SS": 0, "REG": 1, "DV": 2, "OV": 3, "EV": 4}
	rank[input.subject.trust_level] >= rank[minimum]
}

# ---------------------------------------------------------------------------------------------------
# Operation rules
#
# A pattern is a dotted name ("agent.invoke", "agent.*") or "METHOD /path/glob"; the space tells the
# forms apart, and a pattern matches operations of its own form only. "*" is exactly one segment (any
# text, empty included), "**" any number of segments including none; wildcards are whole segments only
# and any other segment is literal. The method compares case-insensitively ("*" is any method),
# segments case-sensitively (unless input.resource.case_insensitive is true, which applies to
# input.action.http_operation as to input.action.operation). A path ending in "/" is
# matched with and without that slash. An operation's query string and fragment are ignored, and an HTTP path
# must start with "/". Matching goes through an anchored regular expression built from the pattern's
# segments, with every literal segment escaped.

operation_matches(pattern, operation) if {
	not contains(pattern, " ")
	not contains(operation, " ")
	regex.match(segments_regex(split(pattern, "."), "."), concat("", [".", operation]))
}

operation_matches(pattern, operation) if {
	pattern_parts := http_parts(pattern)
	operation_parts := http_parts(operation)
	method_matches(pattern_parts[0], operation_parts[0])
	path := comparable_path(strip_query(operation_parts[1]))
	startswith(path, "/")
	some candidate in path_forms(path)
	regex.match(segments_regex(path_segments(comparable_path(pattern_parts[1])), "/"), candidate)
}

# A path ending in "/" is governed by the rules for the path without it too ("GET /secret" covers
# "/secret/"); the most specific matching rule still decides.
path_forms(path) := {path, trim_suffix(path, "/")} if {
	endswith(path, "/")
	path != "/"
} else := {path}

# On a gateway route whose upstream ignores case, paths and patterns compare in lower case.
comparable_path(path) := lower(path) if {
	input.resource.case_insensitive == true
} else := path

# Over one of the policy grammar's structural limits: more than 32 segments, more than 8 wildcard
# segments or more than one "**" (MAX_PATTERN_SEGMENTS, MAX_PATTERN_WILDCARDS, MAX_PATTERN_DOUBLE_STARS).
# The registry never builds such a bundle; a pattern from elsewhere denies every request past the
# policy-wide checks instead of being matched (the built-in evaluator's matching work is bounded by these
# limits) or skipped (which would drop its restriction).
pattern_over_limit(pattern) if {
	is_string(pattern)
	count(pattern_shape(pattern).segments) > 32
}

pattern_over_limit(pattern) if {
	is_string(pattern)
	segments := pattern_shape(pattern).segments
	count([s | some s in segments; s in {"*", "**"}]) > 8
}

pattern_over_limit(pattern) if {
	is_string(pattern)
	segments := pattern_shape(pattern).segments
	count([s | some s in segments; s == "**"]) > 1
}

# "METHOD /path" split at its first space.
http_parts(text) := [parts[0], concat(" ", array.slice(parts, 1, count(parts)))] if {
	parts := split(text, " ")
	count(parts) > 1
}

# The segments after the leading "/"; undefined for a path without one.
path_segments(path) := array.slice(segments, 1, count(segments)) if {
	startswith(path, "/")
	segments := split(path, "/")
}

strip_query(path) := split(split(path, "?")[0], "#")[0]

method_matches(pattern_method, _) if {
	pattern_method == "*"
}

method_matches(pattern_method, method) if {
	upper(pattern_method) == upper(method)
}

# Each segment becomes separator + segment, so "**" can stand for no segment at all.
segments_regex(segments, separator) := concat("", ["^", concat("", [segment_regex(segment, separator) | some segment in segments]), "$"])

segment_regex(segment, separator) := concat("", ["(?:", regex_escape(separator), "[^", separator, "]*)*"]) if {
	segment == "**"
} else := concat("", [regex_escape(separator), "[^", separator, "]*"]) if {
	segment == "*"
} else := concat("", [regex_escape(separator), regex_escape(segment)])

# strings.replace_n replaces all keys in one pass, so the escaping backslashes are not escaped again.
regex_escape(text) := strings.replace_n(
	{
		`\`: `\\`, `.`: `\.`, `+`: `\+`, `*`: `\*`, `?`: `\?`, `(`: `\(`, `)`: `\)`,
		`|`: `\|`, `[`: `\[`, `]`: `\]`, `{`: `\{`, `}`: `\}`, `^`: `\^`, `$`: `\$`
	},
	text
)

# Only the most specific matching pattern applies. Candidates are ranked by this key, smallest first:
#   1. fewer wildcards (each "*" or "**" segment, plus a "*" method);
#   2. longer literal prefix (literal segments before the first wildcard segment), negated;
#   3. a literal method before a "*" method;
#   4. fewer "**" segments;
#   5. more segments in all, negated;
#   6. the pattern text (OPA orders strings by code point, as the built-in evaluator does);
#   7. the later rule, for a pattern that occurs twice (possible only in an unmerged document).
operation_rule(policy, operation) := rules[index] if {
	is_string(operation)
	rules := list_field(policy, "operations")
	ranked := [array.concat(specificity(rule.pattern), [rule.pattern, 0 - i]) |
		some i, rule in rules
		is_string(rule.pattern)
		operation_matches(rule.pattern, operation)
	]
	count(ranked) > 0
	index := 0 - sort(ranked)[0][6]
}

specificity(pattern) := [wildcards + method_wildcard, 0 - literal_prefix(segments), method_wildcard, double_stars, 0 - count(segments)] if {
	shape := pattern_shape(pattern)
	segments := shape.segments
	method_wildcard := wildcard_count(shape.method)
	wildcards := count([s | some s in segments; s in {"*", "**"}])
	double_stars := count([s | some s in segments; s == "**"])
}

# An HTTP pattern whose path lacks the leading "/" has no shape; it never matches anyway.
pattern_shape(pattern) := {"method": parts[0], "segments": segments} if {
	parts := http_parts(pattern)
	segments := path_segments(parts[1])
} else := {"method": null, "segments": split(pattern, ".")} if {
	not contains(pattern, " ")
}

wildcard_count(method) := 1 if {
	method == "*"
} else := 0

literal_prefix(segments) := min(positions) if {
	positions := {i | some i, s in segments; s in {"*", "**"}}
	count(positions) > 0
} else := count(segments)

# ---------------------------------------------------------------------------------------------------
# MCP tool rules
#
# A rule's tool is a pattern: "*" matches any run of characters (none included); every other character
# is literal and compares case-sensitively. Matching goes through an anchored regular expression (RE2,
# so linear in the tool name) of the pattern's literal parts, each escaped, joined by ".*" with "."
# matching newlines too. Not glob.match: its [] delimiters mean ".", and even without delimiters it
# matches "ab*ba" against "aba" (vector mcp-tool-pattern-prefix-and-suffix-do-not-overlap). A pattern
# with more than 8 "*" (MAX_PATTERN_WILDCARDS) matches nothing and denies every request past the
# policy-wide checks (mcp_tool_pattern_over_limit), as over-limit operation patterns do.

mcp_tool_name(request) := tool if {
	tool := request.action.mcp_tool
	is_string(tool)
	tool != ""
} else := tool if {
	request.action.operation == "mcp.tool.call"
	tool := request.resource.identifier
	is_string(tool)
}

# Only the most specific matching pattern applies. Candidates are ranked by this key, smallest first:
#   1. fewer "*" (so a pattern without one comes before any with one);
#   2. longer literal prefix (characters before the first "*"), negated;
#   3. more literal characters, negated (count() counts code points, as the built-in evaluator does);
#   4. the pattern text in code-point order;
#   5. the later rule, for a pattern that occurs twice (possible only in an unmerged document).
mcp_tool_rule(policy) := rules[index] if {
	tool := mcp_tool_name(input)
	rules := list_field(policy, "mcp_tools")
	ranked := [array.concat(tool_pattern_specificity(rule.tool), [rule.tool, 0 - i]) |
		some i, rule in rules
		is_string(rule.tool)
		not tool_pattern_over_limit(rule.tool)
		tool_pattern_matches(rule.tool, tool)
	]
	count(ranked) > 0
	index := 0 - sort(ranked)[0][4]
}

tool_pattern_matches(pattern, tool) if {
	not contains(pattern, "*")
	pattern == tool
}

tool_pattern_matches(pattern, tool) if {
	contains(pattern, "*")
	regex.match(concat("", ["(?s)^", concat(".*", [regex_escape(part) | some part in split(pattern, "*")]), "$"]), tool)
}

tool_pattern_specificity(pattern) := [count(parts) - 1, 0 - count(parts[0]), 0 - count(concat("", parts))] if {
	parts := split(pattern, "*")
}

tool_pattern_over_limit(pattern) if {
	is_string(pattern)
	count(split(pattern, "*")) - 1 > 8
}

# ---------------------------------------------------------------------------------------------------
# Capability class rules: a rule for "a.b" covers "a.b" and "a.b.<anything>"; the longest covering
# class is the most specific and the only one applied; of duplicates the last wins. A null or absent
# capability matches no rule.

class_rule(policy, capability) := rules[index] if {
	is_string(capability)
	rules := list_field(policy, "capability_classes")
	ranked := [[0 - count(rule.class), 0 - i] |
		some i, rule in rules
		is_string(rule.class)
		class_covers(rule.class, capability)
	]
	count(ranked) > 0
	index := 0 - sort(ranked)[0][1]
}

class_covers(rule_class, capability) if {
	rule_class == capability
}

class_covers(rule_class, capability) if {
	startswith(capability, concat("", [rule_class, "."]))
}

# ---------------------------------------------------------------------------------------------------
# Rate limits: the subject's entry; of duplicates the last wins. A tool rule's rpm is a budget per
# subject and tool: its key is "<subject did> mcp_tool <tool name>" (a DID has no space, so it never
# equals a subject-wide key), with the tool's actual name, not the pattern.

subject_rate_limit(policy) := [{"type": "rate_limit.apply", "params": {"rpm": limit.rpm, "key": input.subject.did}}] if {
	limit := rate_limit_entry(policy)
} else := []

mcp_tool_rate_limit(policy) := [{"type": "rate_limit.apply", "params": {"rpm": rpm, "key": key}}] if {
	tool := mcp_tool_name(input)
	rpm := mcp_tool_rule(policy).rpm
	key := concat(" ", [input.subject.did, "mcp_tool", tool])
} else := []

rate_limit_entry(policy) := limits[max(indexes)] if {
	limits := list_field(policy, "rate_limits")
	indexes := {i | some i, entry in limits; entry.did == input.subject.did}
	count(indexes) > 0
}
