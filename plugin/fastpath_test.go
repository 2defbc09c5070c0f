package plugin

import (
	"strconv"
	"strings"
	"testing"
)

// The response-header fast paths must answer what the general expressions
// they replace answer.

func TestEventStream(t *testing.T) {
	tests := []struct {
		ct   string
		want bool
	}{
		{"text/event-stream", true},
		{"text/event-stream; charset=utf-8", true},
		{"  Text/Event-Stream", true},
		{"TEXT/EVENT-STREAM", true},
		{"\u00a0text/event-stream", true}, // TrimSpace trims Unicode spaces
		{"application/json", false},
		{"text/event-strea", false},
		{"", false},
		{"text/event_stream", false},
		{"text/\u212aevent-stream", false}, // the Kelvin sign lower-cases to 'k', which the type has not
		{"text/event-\u017ftream", false},  // EqualFold would take the long s for 's'; ToLower does not
	}
	for _, tt := range tests {
		if got := eventStream(tt.ct); got != tt.want {
			t.Errorf("eventStream(%q) = %v, want %v", tt.ct, got, tt.want)
		}
		if ref := strings.HasPrefix(strings.ToLower(strings.TrimSpace(tt.ct)), "text/event-stream"); ref != tt.want {
			t.Errorf("the general expression gives %v for %q, the table says %v", ref, tt.ct, tt.want)
		}
	}
}

func FuzzEventStream(f *testing.F) {
	for _, s := range []string{"text/event-stream", " TEXT/event-STREAM;x", "text/\u212aevent", "application/json", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ct string) {
		want := strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "text/event-stream")
		if got := eventStream(ct); got != want {
			t.Errorf("eventStream(%q) = %v, want %v", ct, got, want)
		}
	})
}

func TestAtoi(t *testing.T) {
	for _, s := range []string{"200", "404", "099", "000", "999", "20", "2000", "", "2a0", "+20", "-20", " 200", "1e2"} {
		want, _ := strconv.Atoi(s)
		if got := atoi(s); got != want {
			t.Errorf("atoi(%q) = %d, want %d", s, got, want)
		}
	}
}
