//go:build !wasip1

package plugin

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net/http"
	"testing"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/internal/etcdtest"
	"github.com/tidwall/gjson"
)

func postEtcd(t *testing.T, base, path string, body []byte) []byte {
	t.Helper()
	resp, err := http.Post(base+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s %s = %d %s", path, body, resp.StatusCode, b)
	}
	return b
}

// TestEtcdJSON sends the bodies the plugin builds to a real etcd and
// reads its answers with the plugin's parsers.
func TestEtcdJSON(t *testing.T) {
	base := etcdtest.Started(t).URL()
	lease, err := parseGrant(postEtcd(t, base, etcdLeaseGrant, leaseGrantBody(5)))
	if err != nil {
		t.Fatalf("parseGrant: %v", err)
	}
	if ttl, err := parseKeepAlive(postEtcd(t, base, etcdKeepAlive, keepAliveBody(lease))); err != nil || ttl != 5 {
		t.Fatalf("parseKeepAlive = %d, %v; want 5", ttl, err)
	}
	pre := "/fs/pool/"
	rev, kvs, err := parseRange(postEtcd(t, base, etcdRange, rangeBody(pre, prefixEnd(pre))))
	if err != nil || rev <= 0 || len(kvs) != 0 {
		t.Fatalf("parseRange(empty) = %d, %v, %v", rev, kvs, err)
	}
	puts := []etcdPut{{key: pre + "m/a", value: []byte(`{"x":1}`), lease: lease}, {key: pre + "u/a", value: []byte("\x00bin")}}
	ok, err := parseTxn(postEtcd(t, base, etcdTxn, txnBody(pre+"m/", prefixEnd(pre+"m/"), rev, puts)))
	if err != nil || !ok {
		t.Fatalf("parseTxn(at the revision read) = %v, %v; want true", ok, err)
	}
	ok, err = parseTxn(postEtcd(t, base, etcdTxn, txnBody(pre+"m/", prefixEnd(pre+"m/"), rev, puts)))
	if err != nil || ok {
		t.Fatalf("parseTxn(stale revision) = %v, %v; want false", ok, err)
	}
	// A usage write (outside m/) does not fail the members' compare.
	rev, kvs, err = parseRange(postEtcd(t, base, etcdRange, rangeBody(pre, prefixEnd(pre))))
	if err != nil || len(kvs) != 2 || kvs[0].key != pre+"m/a" || string(kvs[0].value) != `{"x":1}` || string(kvs[1].value) != "\x00bin" {
		t.Fatalf("parseRange = %v, %+v, %v", rev, kvs, err)
	}
	postEtcd(t, base, etcdTxn, txnBody(pre+"u/", prefixEnd(pre+"u/"), rev, []etcdPut{{key: pre + "u/b", value: []byte("1")}}))
	if ok, _ := parseTxn(postEtcd(t, base, etcdTxn, txnBody(pre+"m/", prefixEnd(pre+"m/"), rev, puts[:1]))); !ok {
		t.Fatalf("txn after a usage write failed, want it to succeed")
	}
	// A delete in a transaction.
	rev, _, _ = parseRange(postEtcd(t, base, etcdRange, rangeBody(pre, prefixEnd(pre))))
	del := []etcdPut{{key: pre + "u/b", del: true}, {key: pre + "departed", value: []byte("2")}}
	if ok, err := parseTxn(postEtcd(t, base, etcdTxn, txnBody(pre+"m/", prefixEnd(pre+"m/"), rev, del))); err != nil || !ok {
		t.Fatalf("parseTxn(delete) = %v, %v; want true", ok, err)
	}
	if _, kvs, _ := parseRange(postEtcd(t, base, etcdRange, rangeBody(pre+"u/b", pre+"u/c"))); len(kvs) != 0 {
		t.Fatalf("u/b after its delete = %+v, want none", kvs)
	}
	// A revoked lease: keepalive answers TTL 0, its keys are gone.
	postEtcd(t, base, "/v3/lease/revoke", keepAliveBody(lease))
	if ttl, err := parseKeepAlive(postEtcd(t, base, etcdKeepAlive, keepAliveBody(lease))); err != nil || ttl != 0 {
		t.Fatalf("parseKeepAlive(revoked) = %d, %v; want 0", ttl, err)
	}
	if _, kvs, _ := parseRange(postEtcd(t, base, etcdRange, rangeBody(pre+"m/", prefixEnd(pre+"m/")))); len(kvs) != 0 {
		t.Fatalf("members after the lease was revoked = %+v, want none", kvs)
	}
}

func TestMemberCodec(t *testing.T) {
	teams := []string{"a", "b"}
	applied := fairshareSlice(3, 30, []int{1, 2}, []int64{10, 20})
	used := fairshareSlice(2, 5, []int{1, 0}, []int64{5, 0})
	b := encodeMember(teams, []int{4, 1}, applied, used)
	m, ok := decodeMember("r1", b, []string{"b", "c", "a"})
	if !ok || m.ID != "r1" || m.Demand[0] != 1 || m.Demand[1] != 0 || m.Demand[2] != 4 ||
		m.Applied.Capacity != 3 || m.Applied.Reserved[0] != 2 || m.Applied.ReservedTokens[2] != 10 || m.Used.KVTokens != 5 {
		t.Fatalf("decodeMember(%s) for teams b, c, a = %+v, %v", b, m, ok)
	}
	for _, bad := range []string{``, `{}`, `{"teams":["a"],"demand":[1],"applied":[1,2],"used":[1,2,3,4]}`} {
		if _, ok := decodeMember("x", []byte(bad), teams); ok {
			t.Errorf("decodeMember(%q) accepted", bad)
		}
	}
}

func fairshareSlice(c int, k int64, r []int, rt []int64) fairshare.Slice {
	return fairshare.Slice{Capacity: c, KVTokens: k, Reserved: r, ReservedTokens: rt}
}

// TestUsageJSON: the usage object the cluster writes is JSON that the
// plugin's parser reads back, whatever bytes its keys carry: a user's key
// (fairshare.UserKey, with its 0x1f separator), quotes, backslashes,
// control bytes and non-ASCII names.
func TestUsageJSON(t *testing.T) {
	in := map[string]float64{
		"search":                             1.5,
		fairshare.UserKey("search", "ann"):   0.25,
		fairshare.UserKey("search", `a"b\c`): 3,
		"tab\tteam\x00":                      4,
		"équipe-😀":                           5e-300,
	}
	b := appendUsage(nil, in)
	if !gjson.ValidBytes(b) {
		t.Fatalf("usage %q is not JSON", b)
	}
	if out := parseUsage(gjson.ParseBytes(b)); !maps.Equal(in, out) {
		t.Fatalf("parsed %v, want %v", out, in)
	}
}

// TestClusterUsersSynced: a replica publishes the syncedUsers heaviest
// users of every team (ties to the smaller key), so the usage key it
// writes at every sync stays bounded whatever the number of users: for
// three teams of 256 users with 10-byte names, the 32 heaviest of each,
// about 45 bytes per user.
func TestClusterUsersSynced(t *testing.T) {
	u := map[string]float64{"search": 100, "b": 5}
	for _, team := range []string{"search", "b", "c"} {
		for k := range 256 {
			u[fairshare.UserKey(team, fmt.Sprintf("user-%05d", k))] = float64(k%100) + 0.123456789
		}
	}
	top := topUsers(u, syncedUsers)
	if len(top) != 3*syncedUsers {
		t.Fatalf("%d users published, want %d", len(top), 3*syncedUsers)
	}
	for k, x := range top {
		team, _, ok := fairshare.SplitUserKey(k)
		if !ok {
			t.Fatalf("team key %q published as a user", k)
		}
		// Every user left out of the team's is not heavier than one kept.
		for k2, x2 := range u {
			if t2, _, ok := fairshare.SplitUserKey(k2); ok && t2 == team && !hasKey(top, k2) && x2 > x {
				t.Fatalf("%q (%v) kept over %q (%v)", k, x, k2, x2)
			}
		}
	}
	b := appendUsage(nil, top)
	t.Logf("usage key of 3 × %d users: %d bytes (%.1f per user)", syncedUsers, len(b), float64(len(b))/float64(len(top)))
	if len(b) > 45*len(top)+2 {
		t.Fatalf("usage key of %d bytes, want at most 45 per user", len(b))
	}
}
