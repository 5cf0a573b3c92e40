# Unit tests of service.policy for OPA users (`opa test policies/service`). The named tests below
# mirror vectors of policies/decision-vectors.json (each names the vector it copies); the table is the
# contract and the built-in evaluator's test runs every vector of it. test_every_decision_vector runs
# the whole table here too when it is loaded as data.decision_vectors (see policies/README.md), and
# passes vacuously when it is not.
package service.policy_test

import rego.v1

import data.service.policy

alice := "did:web:agents.example.com:alice"

bob := "did:web:agents.example.com:bob"

base_request := {
	"pip_version": "service.pip.v1",
	"subject": {"did": alice, "badge_jti": "b7f0c6de-5a1e-4c55-9d59-2f3c5d1a0b11", "ial": "IAL-1", "trust_level": "DV"},
	"action": {"operation": "GET /v1/things", "capability_class": null},
	"resource": {"identifier": "/v1/things"},
	"context": {"txn_id": "0190f4a0-7b1c-7000-8000-000000000001", "enforcement_mode": "EM-GUARD"},
	"environment": {"workspace": "6f1c2a4e-0d7b-4c3e-9a57-1b2c3d4e5f60", "pep_id": "pep-test", "time": "2026-03-01T12:00:00Z"}
}

empty_policy := {
	"min_trust_level": null,
	"allowed_dids": null,
	"denied_dids": [],
	"rate_limits": [],
	"operations": [],
	"mcp_tools": [],
	"capability_classes": []
}

# object.union merges nested objects, so an override names only what differs from the base.
request(overrides) := object.union(base_request, overrides)

resolved(overrides) := object.union(empty_policy, overrides)

# The four outputs for one request, with `resolved_policy` as the subject's bundle entry.
result_of(resolved_policy, request_value) := {"decision": d, "reason": r, "obligations": o, "ttl": t} if {
	entries := {request_value.subject.did: resolved_policy}
	d := policy.decision with input as request_value with data.resolved_policies.by_agent_did as entries
	r := policy.reason with input as request_value with data.resolved_policies.by_agent_did as entries
	o := policy.obligations with input as request_value with data.resolved_policies.by_agent_did as entries
	t := policy.ttl with input as request_value with data.resolved_policies.by_agent_did as entries
}

# required_trust_level, or null where the module leaves it undefined.
required_of(resolved_policy, request_value) := level if {
	entries := {request_value.subject.did: resolved_policy}
	level := policy.required_trust_level with input as request_value with data.resolved_policies.by_agent_did as entries
} else := null

allow(obligations) := {"decision": "ALLOW", "reason": "allowed", "obligations": obligations, "ttl": 60}

deny(reason) := {"decision": "DENY", "reason": reason, "obligations": [], "ttl": 0}

tool_call_request(tool) := request({"action": {"operation": "mcp.tool.call", "mcp_tool": tool}, "resource": {"identifier": tool}})

# Vector empty-policy-allows.
test_empty_policy_allows if {
	result_of(empty_policy, base_request) == allow([])
}

# Vector denied-beats-allow-list.
test_denied_beats_allow_list if {
	result_of(resolved({"allowed_dids": [alice], "denied_dids": [alice]}), base_request) == deny("denied_did")
}

# Vector allow-list-empty-nobody.
test_allow_list_empty_nobody if {
	result := result_of(resolved({"allowed_dids": []}), request({"subject": {"trust_level": "EV"}}))
	result == deny("not_in_allow_list")
}

# Vectors minimum-reg-denies-ss and minimum-reg-allows-reg.
test_trust_level_boundary if {
	result_of(resolved({"min_trust_level": "REG"}), request({"subject": {"trust_level": "SS"}})) == deny("trust_level_below_minimum")
	result_of(resolved({"min_trust_level": "REG"}), request({"subject": {"trust_level": "REG"}})) == allow([])
}

# Vector minimum-empty-string-allows-ss.
test_empty_minimum_is_no_minimum if {
	result_of(resolved({"min_trust_level": ""}), request({"subject": {"trust_level": "SS"}})) == allow([])
}

# Vectors specific-exact-relaxes-broad and specific-broad-still-governs-others.
test_most_specific_pattern_wins if {
	rules := resolved({"operations": [
		{"pattern": "GET /v1/**", "min_trust_level": "EV"},
		{"pattern": "GET /v1/things", "min_trust_level": ""}
	]})
	result_of(rules, base_request) == allow([])
	result_of(rules, request({"action": {"operation": "GET /v1/other"}})) == deny("operation_trust_level_below_minimum")
}

# Vector operation-double-star-zero-segments.
test_double_star_matches_zero_segments if {
	rules := resolved({"operations": [{"pattern": "GET /v1/**/status", "denied_dids": [alice]}]})
	result_of(rules, request({"action": {"operation": "GET /v1/status"}})) == deny("operation_denied_did")
}

# Vector operation-query-string-ignored.
test_query_string_ignored if {
	rules := resolved({"operations": [{"pattern": "GET /v1/things", "denied_dids": [alice]}]})
	result_of(rules, request({"action": {"operation": "GET /v1/things?limit=5&cursor=abc"}})) == deny("operation_denied_did")
}

# Not in the table: regular expression metacharacters in a pattern are literal.
test_pattern_metacharacters_are_literal if {
	rules := resolved({"operations": [{"pattern": "a.(b)+", "denied_dids": [alice]}]})
	result_of(rules, request({"action": {"operation": "a.bb"}})) == allow([])
	result_of(rules, request({"action": {"operation": "a.(b)+"}})) == deny("operation_denied_did")
}

# Vector mcp-tool-from-resource.
test_mcp_tool_from_resource if {
	rules := resolved({"mcp_tools": [{"tool": "search", "denied_dids": [alice]}]})
	result_of(rules, request({"action": {"operation": "mcp.tool.call"}, "resource": {"identifier": "search"}})) == deny("mcp_tool_denied_did")
}

# Vectors mcp-tool-pattern-fewer-wildcards and mcp-tool-exact-beats-pattern.
test_most_specific_tool_pattern_wins if {
	rules := resolved({"mcp_tools": [
		{"tool": "*", "denied_dids": [alice]},
		{"tool": "fs.*", "min_trust_level": "EV"},
		{"tool": "fs.read"}
	]})
	result_of(rules, tool_call_request("fs.read")) == allow([])
	result_of(rules, tool_call_request("fs.write")) == deny("mcp_tool_trust_level_below_minimum")
	result_of(rules, tool_call_request("net.fetch")) == deny("mcp_tool_denied_did")
}

# Vectors mcp-tool-pattern-brackets-literal and mcp-tool-pattern-question-mark-literal.
test_tool_pattern_characters_are_literal if {
	rules := resolved({"mcp_tools": [{"tool": "[ab]?*", "denied_dids": [alice]}]})
	result_of(rules, request({"action": {"mcp_tool": "ax"}})) == allow([])
	result_of(rules, request({"action": {"mcp_tool": "[ab]?x"}})) == deny("mcp_tool_denied_did")
}

# Vector http-operation-checked-first.
test_http_operation_checked_first if {
	rules := resolved({"operations": [
		{"pattern": "mcp.tool.call", "denied_dids": [alice]},
		{"pattern": "POST /mcp", "min_trust_level": "EV"}
	]})
	req := request({"action": {"operation": "mcp.tool.call", "http_operation": "POST /mcp", "mcp_tool": "search"}})
	result_of(rules, req) == deny("operation_trust_level_below_minimum")
}

# Vector mcp-tool-rpm-after-subject-limit.
test_tool_rate_limit_obligation if {
	rules := resolved({"rate_limits": [{"did": alice, "rpm": 600}], "mcp_tools": [{"tool": "fs.*", "rpm": 10}]})
	result_of(rules, request({"action": {"mcp_tool": "fs.read"}})) == allow([
		{"type": "rate_limit.apply", "params": {"rpm": 600, "key": alice}},
		{"type": "rate_limit.apply", "params": {"rpm": 10, "key": concat(" ", [alice, "mcp_tool", "fs.read"])}}
	])
}

# Vector leaf-capability-checked.
test_leaf_capability if {
	rules := resolved({"capability_classes": [{"class": "payments", "allowed_dids": [bob]}]})
	req := request({"context": {"leaf_capability": "payments.refund", "delegation_depth": 1}})
	result_of(rules, req) == deny("leaf_capability_not_in_allow_list")
}

# Vector rate-limit-picks-subject.
test_rate_limit_obligation if {
	rules := resolved({"rate_limits": [{"did": bob, "rpm": 10}, {"did": alice, "rpm": 600}]})
	result_of(rules, base_request) == allow([{"type": "rate_limit.apply", "params": {"rpm": 600, "key": alice}}])
}

# Not in the table (the table gives every vector a bundle entry): without one, data.config applies,
# and it may be a raw org document with absent fields.
test_org_policy_when_agent_has_no_entry if {
	org := {"version": "1", "denied_dids": [alice]}
	others := {bob: empty_policy}
	policy.reason == "denied_did" with input as base_request with data.resolved_policies.by_agent_did as others with data.config as org
	policy.decision == "DENY" with input as base_request with data.resolved_policies.by_agent_did as others with data.config as org
}

test_agent_entry_beats_org_policy if {
	mine := {alice: empty_policy}
	org := {"version": "1", "denied_dids": [alice]}
	policy.decision == "ALLOW" with input as base_request with data.resolved_policies.by_agent_did as mine with data.config as org
}

# The whole table, when loaded as data.decision_vectors.
vectors := loaded if {
	loaded := data.decision_vectors
	is_array(loaded)
} else := []

failing_vectors contains vector.name if {
	some vector in vectors
	not vector_holds(vector)
}

vector_holds(vector) if {
	result := result_of(vector.policy, vector.input)
	result.decision == vector.expected.decision
	result.reason == vector.expected.reason
	result.obligations == vector.expected.obligations
	result.ttl == expected_ttl(vector.expected.decision)
	required_of(vector.policy, vector.input) == object.get(vector.expected, "required_trust_level", null)
}

expected_ttl(decision) := 60 if {
	decision == "ALLOW"
} else := 0

test_every_decision_vector if {
	print("decision vectors:", count(vectors), "failing:", failing_vectors)
	count(failing_vectors) == 0
}
