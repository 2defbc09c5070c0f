package plugin

import "strings"

// The field names the parser accepts at each path of the configuration, for
// the "did you mean" of an unknown field. TestSuggestionFieldsMatchParser
// checks each list against the cases of the parser's switch at that path
// (plugin/readme_test.go's parserFields): a field added to the parser and not
// here fails it.
var (
	rootFields = []string{"team_header", "class_header", "default_class", "default_team", "unknown_team",
		"half_life", "entry_penalty", "cost", "default_max_tokens", "max_body_bytes", "max_response_bytes",
		"paths", "request_timeout", "tick", "holder_timeout", "cas_retries", "failure_mode", "response_headers",
		"status_path", "status_token", "max_queue_time", "queue_limit", "team_queue_limit", "dispatch_tick",
		"hold_headers", "hold_headers_probe", "batch_aging", "status_public", "unscheduled", "default_model",
		"unknown_model", "mode", "shadow_strip_priority", "user_header", "user_from_body", "status_users", "pools", "cluster"}
	costFields = []string{"prompt_token", "cached_prompt_token", "completion_token"}
	poolFields = []string{"name", "capacity", "kv_tokens", "throughput", "throughput_burst", "models", "teams", "engine_priority", "capacity_from", "spill_to",
		"max_users", "user_active", "user_idle"}
	// capacityFromFields are a pool's capacity_from fields (capacity.go).
	capacityFromFields = []string{"cluster", "engines", "addresses", "header", "path", "authority", "interval",
		"timeout", "expire", "max_num_seqs"}
	teamFields    = []string{"share", "weight", "lending_limit", "borrowing_limit", "users"}
	clusterFields = []string{"etcd_cluster", "authority", "key_prefix", "authorization", "replica",
		"sync_interval", "lease_ttl", "timeout", "safe_fraction"}
)

// suggest completes the problem just added for the unknown field key with
// the known field nearest to it, when one is near enough to be a slip of the
// keyboard: `max_queue_tme: unknown field (did you mean "max_queue_time"?)`.
func (ps *problems) suggest(key string, known []string) {
	if s := nearest(key, known); s != "" && len(*ps) > 0 {
		(*ps)[len(*ps)-1] += ` (did you mean "` + s + `"?)`
	}
}

// nearest returns the name of known closest to key by edit distance, or ""
// if none is close: a name equal to key once both are lower-cased and
// stripped of '_' and '-' ("maxQueueTime"), else one within one edit of key
// (two for names of six bytes or more). The first of equally close names
// wins.
func nearest(key string, known []string) string {
	best, bestD := "", -1
	for _, k := range known {
		if fold(k) == fold(key) {
			return k
		}
		limit := 1
		if len(k) >= 6 {
			limit = 2
		}
		if d := editDistance(key, k); d <= limit && (bestD < 0 || d < bestD) {
			best, bestD = k, d
		}
	}
	return best
}

// fold lower-cases s and removes '_' and '-'.
func fold(s string) string {
	return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(s))
}

// editDistance is the Levenshtein distance between a and b in bytes
// (insertions, deletions and substitutions), with a transposition of two
// adjacent bytes counted as one edit (optimal string alignment).
func editDistance(a, b string) int {
	// d[i][j] is the distance between a[:i] and b[:j]; three rows suffice.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
