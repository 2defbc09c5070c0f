package plugin

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"

	"github.com/tidwall/gjson"
)

// etcd's JSON gRPC gateway, as the plugin speaks it with proxy_http_call:
// POST a JSON body to /v3/lease/grant, /v3/lease/keepalive, /v3/kv/range
// and /v3/kv/txn; keys and values are base64, int64 fields (revisions,
// lease IDs, TTLs) decimal strings. TestEtcdJSON checks every body and
// every parser against a real etcd.

// Paths of the etcd gateway.
const (
	etcdLeaseGrant = "/v3/lease/grant"
	etcdKeepAlive  = "/v3/lease/keepalive"
	etcdRange      = "/v3/kv/range"
	etcdTxn        = "/v3/kv/txn"
)

var errEtcdAnswer = errors.New("fairshare: etcd answer not understood")

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// prefixEnd is the range_end of every key starting with p: p with its
// last byte incremented (p is never empty nor ends in 0xff here: key
// prefixes end in "/").
func prefixEnd(p string) string {
	b := []byte(p)
	b[len(b)-1]++
	return string(b)
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	// JSON's escapes, not Go's (strconv.Quote writes \x1f and \U0001f600,
	// which JSON does not have): quote and backslash escaped, control
	// bytes as \u00XX (a user's usage key carries 0x1f,
	// fairshare.UserKey), every other byte as it is.
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

func leaseGrantBody(ttlSeconds int64) []byte {
	return []byte(`{"TTL":` + strconv.FormatInt(ttlSeconds, 10) + `}`)
}

func keepAliveBody(lease string) []byte {
	return []byte(`{"ID":"` + lease + `"}`)
}

// rangeBody reads every key from key up to end (exclusive).
func rangeBody(key, end string) []byte {
	return []byte(`{"key":"` + b64(key) + `","range_end":"` + b64(end) + `"}`)
}

// etcdPut is one put of a transaction, or with del one delete of key.
type etcdPut struct {
	key   string
	value []byte
	lease string // "" for none
	del   bool
}

// txnBody puts (or deletes) every put if no key in [cmpKey, cmpEnd) was modified after
// revision rev (the revision of the read the puts were computed from).
// Keys deleted since (an expired lease) do not fail the compare: that
// only frees room.
func txnBody(cmpKey, cmpEnd string, rev int64, puts []etcdPut) []byte {
	b := []byte(`{"compare":[{"key":"` + b64(cmpKey) + `","range_end":"` + b64(cmpEnd) +
		`","target":"MOD","result":"LESS","mod_revision":"` + strconv.FormatInt(rev+1, 10) + `"}],"success":[`)
	for i, p := range puts {
		if i > 0 {
			b = append(b, ',')
		}
		if p.del {
			b = append(b, `{"request_delete_range":{"key":"`...)
			b = append(b, b64(p.key)...)
			b = append(b, `"}}`...)
			continue
		}
		b = append(b, `{"request_put":{"key":"`...)
		b = append(b, b64(p.key)...)
		b = append(b, `","value":"`...)
		b = base64.StdEncoding.AppendEncode(b, p.value)
		b = append(b, '"')
		if p.lease != "" {
			b = append(b, `,"lease":"`...)
			b = append(b, p.lease...)
			b = append(b, '"')
		}
		b = append(b, `}}`...)
	}
	return append(b, `]}`...)
}

// etcdKV is one key of a range answer.
type etcdKV struct {
	key   string
	value []byte
}

// etcdError returns the error an etcd answer carries, if any.
func etcdError(r gjson.Result) error {
	if m := r.Get("message"); m.Exists() {
		return fmt.Errorf("fairshare: etcd: %s", m.String())
	}
	if m := r.Get("error"); m.Exists() {
		return fmt.Errorf("fairshare: etcd: %s", m.String())
	}
	return nil
}

// parseGrant returns the lease ID of a lease/grant answer.
func parseGrant(body []byte) (string, error) {
	r := gjson.ParseBytes(body)
	if err := etcdError(r); err != nil {
		return "", err
	}
	id := r.Get("ID").String()
	if _, err := strconv.ParseInt(id, 10, 64); err != nil || id == "0" {
		return "", errEtcdAnswer
	}
	return id, nil
}

// parseKeepAlive returns the TTL a keepalive answer gives the lease: 0
// when the lease is gone (expired or revoked).
func parseKeepAlive(body []byte) (int64, error) {
	r := gjson.ParseBytes(body)
	if err := etcdError(r); err != nil {
		return 0, err
	}
	res := r.Get("result")
	if !res.Exists() {
		return 0, errEtcdAnswer
	}
	return res.Get("TTL").Int(), nil
}

// parseRange returns the revision and the keys of a range answer.
func parseRange(body []byte) (int64, []etcdKV, error) {
	r := gjson.ParseBytes(body)
	if err := etcdError(r); err != nil {
		return 0, nil, err
	}
	rev, err := strconv.ParseInt(r.Get("header.revision").String(), 10, 64)
	if err != nil {
		return 0, nil, errEtcdAnswer
	}
	var kvs []etcdKV
	for _, x := range r.Get("kvs").Array() {
		k, err1 := base64.StdEncoding.DecodeString(x.Get("key").String())
		v, err2 := base64.StdEncoding.DecodeString(x.Get("value").String())
		if err1 != nil || err2 != nil {
			return 0, nil, errEtcdAnswer
		}
		kvs = append(kvs, etcdKV{key: string(k), value: v})
	}
	return rev, kvs, nil
}

// parseTxn reports whether a transaction succeeded.
func parseTxn(body []byte) (bool, error) {
	r := gjson.ParseBytes(body)
	if err := etcdError(r); err != nil {
		return false, err
	}
	if !r.Get("header").Exists() {
		return false, errEtcdAnswer
	}
	return r.Get("succeeded").Bool(), nil
}
