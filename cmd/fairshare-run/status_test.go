package main

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

func TestParseStatus(t *testing.T) {
	want := []statusPool{{Name: "llama-8b", Capacity: 16, Teams: []statusTeam{
		{Team: "search", Share: 0.5, Weight: 1, Reserved: 8, InFlight: 5, Usage: 12.5, LevelFairshare: 2, Rank: 0},
		{Team: "research", Share: 0.2, Weight: 1, Reserved: 3, InFlight: 20, Borrowing: 17, Usage: 99, LevelFairshare: 0.1, Rank: 1, Phantoms: 2},
	}}}
	tests := []struct {
		name string
		in   string
	}{
		{"pools array, teams array", `{"pools":[{"name":"llama-8b","capacity":16,"teams":[
			{"team":"search","share":0.5,"weight":1,"reserved":8,"in_flight":5,"borrowing":0,"usage":12.5,"level_fairshare":2,"rank":0,"phantoms":0},
			{"team":"research","share":0.2,"weight":1,"reserved":3,"in_flight":20,"borrowing":17,"usage":99,"level_fairshare":0.1,"rank":1,"phantoms":2}]}]}`},
		{"pools array, team names in name", `{"pools":[{"name":"llama-8b","capacity":16,"teams":[
			{"name":"search","share":0.5,"weight":1,"reserved":8,"in_flight":5,"usage":12.5,"level_fairshare":2},
			{"name":"research","share":0.2,"weight":1,"reserved":3,"in_flight":20,"borrowing":17,"usage":99,"level_fairshare":0.1,"rank":1,"phantoms":2}]}]}`},
		{"top-level array", `[{"pool":"llama-8b","capacity":16,"teams":[
			{"team":"search","share":0.5,"weight":1,"reserved":8,"in_flight":5,"usage":12.5,"level_fairshare":2},
			{"team":"research","share":0.2,"weight":1,"reserved":3,"in_flight":20,"borrowing":17,"usage":99,"level_fairshare":0.1,"rank":1,"phantoms":2}]}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStatus([]byte(tt.in))
			if err != nil {
				t.Fatalf("parseStatus: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("parseStatus =\n%+v\nwant\n%+v", got, want)
			}
			if n, b := got[0].inFlight(); n != 27 || b != 17 {
				t.Errorf("inFlight() = %d, %d, want 27 (phantoms included), 17", n, b)
			}
		})
	}
	// An infinite LF is null.
	got, err := parseStatus([]byte(`{"pools":[{"name":"p","teams":[{"team":"a","level_fairshare":null},{"team":"b"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if lf := got[0].Teams[0].LevelFairshare; !math.IsInf(lf, 1) {
		t.Errorf("level_fairshare null = %v, want +Inf", lf)
	}
	if lf := got[0].Teams[1].LevelFairshare; lf != 0 {
		t.Errorf("level_fairshare absent = %v, want 0", lf)
	}
	// Pools and teams as objects keyed by name (sorted by name).
	got, err = parseStatus([]byte(`{"pools":{"p":{"capacity":4,"teams":{"b":{"in_flight":1},"a":{"in_flight":2}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != "p" || len(got[0].Teams) != 2 || got[0].Teams[0].Team != "a" || got[0].Teams[0].InFlight != 2 {
		t.Errorf("parseStatus(objects) = %+v", got)
	}
	for _, bad := range []string{"", "not json", "{}", `{"pools":[]}`, `[1,2]`} {
		if _, err := parseStatus([]byte(bad)); err == nil {
			t.Errorf("parseStatus(%q) = nil error", bad)
		}
	}
}

func TestFetchStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/fairshare/status" {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":{"message":"unauthorized"}}`)
			return
		}
		io.WriteString(w, `{"pools":[{"name":"p","capacity":4,"teams":[{"team":"a","in_flight":1}]}]}`)
	}))
	defer srv.Close()
	ctx := context.Background()
	pools, err := fetchStatus(ctx, srv.Client(), srv.URL+"/fairshare/status", "tok")
	if err != nil || len(pools) != 1 || pools[0].Teams[0].InFlight != 1 {
		t.Errorf("fetchStatus(with token) = %+v, %v", pools, err)
	}
	if _, err := fetchStatus(ctx, srv.Client(), srv.URL+"/fairshare/status", ""); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("fetchStatus(without token) error = %v, want the 401", err)
	}
	if _, err := fetchStatus(ctx, srv.Client(), srv.URL+"/elsewhere", "tok"); err == nil {
		t.Errorf("fetchStatus(wrong path) = nil error")
	}
}

func FuzzParseStatus(f *testing.F) {
	f.Add([]byte(`{"pools":[{"name":"p","capacity":4,"teams":[{"team":"a","in_flight":1}]}]}`))
	f.Add([]byte(`{"pools":{"p":{"teams":{"a":{}}}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		parseStatus(b) // must not panic
	})
}

func TestReadSSE(t *testing.T) {
	stream := "data: {\"a\":1}\n\n" +
		": a comment\n\n" +
		"data:{\"b\":2}\r\n\r\n" +
		"event: x\ndata: {\"c\":3}\n\n" +
		"data: [DONE]\n\n" +
		"data: {\"after\":true}\n\n"
	var got []string
	err := readSSE(strings.NewReader(stream), func(d []byte) error {
		got = append(got, string(d))
		return nil
	})
	if err != nil {
		t.Fatalf("readSSE: %v", err)
	}
	if want := []string{`{"a":1}`, `{"b":2}`, `{"c":3}`}; !reflect.DeepEqual(got, want) {
		t.Errorf("readSSE payloads = %q, want %q (stop at [DONE])", got, want)
	}
	// No [DONE], no final newline: the last line still counts.
	got = nil
	readSSE(strings.NewReader("data: x\n\ndata: y"), func(d []byte) error { got = append(got, string(d)); return nil })
	if want := []string{"x", "y"}; !reflect.DeepEqual(got, want) {
		t.Errorf("readSSE(unterminated) = %q, want %q", got, want)
	}
	// The callback's error stops the stream; errDone stops it cleanly.
	boom := errors.New("boom")
	if err := readSSE(strings.NewReader("data: 1\n\ndata: 2\n\n"), func([]byte) error { return boom }); err != boom {
		t.Errorf("readSSE with a failing callback = %v, want %v", err, boom)
	}
	if err := readSSE(strings.NewReader("data: 1\n\n"), func([]byte) error { return errDone }); err != nil {
		t.Errorf("readSSE with errDone = %v, want nil", err)
	}
	// A broken body is an error.
	if err := readSSE(io.MultiReader(strings.NewReader("data: 1\n"), errReader{}), func([]byte) error { return nil }); err == nil {
		t.Errorf("readSSE(broken body) = nil, want an error")
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }
