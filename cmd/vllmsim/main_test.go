package main

import (
	"strings"
	"testing"
)

func TestRunRejectsBadFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-policy", "lifo"}, "config.policy"},
		{[]string{"-preset", "huge"}, "-preset"},
		{[]string{"-preempt-waiting", "always"}, "config.waitingPreempt"},
		{[]string{"-preset", "test", "-max-model-len", "4096"}, "config.maxModelLen"},
		{[]string{"-replicas", "0", "-time-scale", "0"}, "-time-scale"},
		{[]string{"extra"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		err := run(tt.args)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run(%q) = %v, want an error about %s", tt.args, err, tt.want)
		}
	}
}
