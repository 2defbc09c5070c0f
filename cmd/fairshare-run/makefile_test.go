package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestMakeCheckConfig: make check-config is listed by make help, runs
// fairshare-run -check on CONFIG, and without CONFIG stops before building
// anything with a message that says what to set.
func TestMakeCheckConfig(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("this test needs GNU make: %v", err)
	}
	makeIn := func(args ...string) (string, string, error) {
		cmd := exec.Command("make", append([]string{"--no-print-directory", "-C", "../.."}, args...)...)
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}
	help, _, err := makeIn("help")
	if err != nil || !strings.Contains(help, "  check-config  ") || !strings.Contains(help, "CONFIG=file.json") {
		t.Errorf("make help = %v:\n%s\nwant a check-config line naming CONFIG=file.json", err, help)
	}
	out, stderr, err := makeIn("check-config")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() == 0 {
		t.Errorf("make check-config without CONFIG = %v, want a failure", err)
	}
	if want := "make check-config: no CONFIG: name the plugin configuration to check, e.g. make check-config CONFIG=testdata/plugin/example.json"; !strings.Contains(stderr, want) {
		t.Errorf("make check-config without CONFIG printed %q, want %q", stderr, want)
	}
	if strings.Contains(out+stderr, "go build") {
		t.Errorf("make check-config without CONFIG built something:\n%s%s", out, stderr)
	}
	plan, _, err := makeIn("-n", "check-config", "CONFIG=testdata/plugin/spill.json")
	if err != nil || !strings.Contains(plan, "./build/fairshare-run -check 'testdata/plugin/spill.json'") {
		t.Errorf("make -n check-config CONFIG=testdata/plugin/spill.json = %v:\n%s\nwant it to run fairshare-run -check on the file", err, plan)
	}
}
