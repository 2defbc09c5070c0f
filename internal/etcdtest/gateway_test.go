package etcdtest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// post sends body as JSON to path and decodes the answer into out; it
// returns the HTTP status.
func post(t *testing.T, base, path string, body any, out any) int {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(base+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("POST %s: %v in %s", path, err, data)
		}
	}
	return resp.StatusCode
}

type kv struct {
	Key         string `json:"key"`
	Value       string `json:"value"`
	ModRevision string `json:"mod_revision"`
	Lease       string `json:"lease"`
}

type header struct {
	Revision string `json:"revision"`
}

// TestGateway checks that the embedded etcd's gRPC gateway answers the
// JSON calls the plugin makes with proxy_http_call: lease grant and
// keepalive, a put under a lease, a range over a prefix, and a txn whose
// mod_revision compare over the prefix succeeds at the revision read and
// fails once another key of the prefix changed.
func TestGateway(t *testing.T) {
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	base := s.URL()

	var grant struct {
		ID  string `json:"ID"`
		TTL string `json:"TTL"`
	}
	if code := post(t, base, "/v3/lease/grant", map[string]any{"TTL": 5}, &grant); code != 200 || grant.ID == "" || grant.TTL != "5" {
		t.Fatalf("lease/grant = %d %+v, want 200 with an ID and TTL 5", code, grant)
	}
	var ka struct {
		Result struct {
			ID  string `json:"ID"`
			TTL string `json:"TTL"`
		} `json:"result"`
	}
	if code := post(t, base, "/v3/lease/keepalive", map[string]any{"ID": grant.ID}, &ka); code != 200 || ka.Result.ID != grant.ID || ka.Result.TTL != "5" {
		t.Fatalf("lease/keepalive = %d %+v, want 200 with ID %s and TTL 5", code, ka, grant.ID)
	}

	if code := post(t, base, "/v3/kv/put", map[string]any{"key": b64("/fs/p/a"), "value": b64("one"), "lease": grant.ID}, nil); code != 200 {
		t.Fatalf("kv/put = %d, want 200", code)
	}
	post(t, base, "/v3/kv/put", map[string]any{"key": b64("/fs/p/b"), "value": b64("two")}, nil)

	var rng struct {
		Header header `json:"header"`
		KVs    []kv   `json:"kvs"`
		Count  string `json:"count"`
	}
	prefixEnd := b64("/fs/p0") // "/fs/p/" with its last byte incremented
	post(t, base, "/v3/kv/range", map[string]any{"key": b64("/fs/p/"), "range_end": prefixEnd}, &rng)
	if len(rng.KVs) != 2 || rng.KVs[0].Key != b64("/fs/p/a") || rng.KVs[0].Value != b64("one") || rng.KVs[0].Lease != grant.ID || rng.KVs[1].Value != b64("two") {
		t.Fatalf("kv/range = %+v, want a (one, under the lease) and b (two)", rng)
	}
	rev, err := strconv.ParseInt(rng.Header.Revision, 10, 64)
	if err != nil {
		t.Fatalf("kv/range revision %q: %v", rng.Header.Revision, err)
	}

	txn := func(readRev int64, value string) bool {
		var out struct {
			Succeeded bool `json:"succeeded"`
		}
		body := map[string]any{
			"compare": []map[string]any{{
				"key": b64("/fs/p/"), "range_end": prefixEnd,
				"target": "MOD", "result": "LESS", "mod_revision": strconv.FormatInt(readRev+1, 10),
			}},
			"success": []map[string]any{{"request_put": map[string]any{"key": b64("/fs/p/a"), "value": b64(value), "lease": grant.ID}}},
		}
		if code := post(t, base, "/v3/kv/txn", body, &out); code != 200 {
			t.Fatalf("kv/txn = %d, want 200", code)
		}
		return out.Succeeded
	}
	if !txn(rev, "three") {
		t.Fatalf("kv/txn at the revision read failed, want it to succeed")
	}
	// The txn itself changed a key of the prefix: the same compare fails.
	if txn(rev, "four") {
		t.Fatalf("kv/txn at a stale revision succeeded, want it to fail")
	}
	post(t, base, "/v3/kv/range", map[string]any{"key": b64("/fs/p/a")}, &rng)
	if len(rng.KVs) != 1 || rng.KVs[0].Value != b64("three") {
		t.Fatalf("after the txns /fs/p/a = %+v, want three", rng.KVs)
	}

	// Revoking the lease deletes the key put under it.
	post(t, base, "/v3/lease/revoke", map[string]any{"ID": grant.ID}, nil)
	rng.KVs = nil
	post(t, base, "/v3/kv/range", map[string]any{"key": b64("/fs/p/a")}, &rng)
	if len(rng.KVs) != 0 {
		t.Fatalf("after lease/revoke /fs/p/a = %+v, want none", rng.KVs)
	}

	// A restarted server keeps its keys.
	s.Stop()
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	post(t, base, "/v3/kv/range", map[string]any{"key": b64("/fs/p/b")}, &rng)
	if len(rng.KVs) != 1 || rng.KVs[0].Value != b64("two") {
		t.Fatalf("after a restart /fs/p/b = %+v, want two", rng.KVs)
	}
}
