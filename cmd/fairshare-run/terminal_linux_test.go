package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestCtrlCUnderMake runs the command as make run does (a make recipe) on a
// pseudo-terminal (script(1)) and types Ctrl-C once the demo has started:
// the command prints its interrupted summary, make exits 0, and make prints
// no "*** [...] Interrupt" line, because the command took the terminal's
// foreground and the interrupt reached it alone.
func TestCtrlCUnderMake(t *testing.T) {
	for _, tool := range []string{"make", "script"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("this test needs %s (util-linux script, GNU make): %v", tool, err)
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "fairshare-run")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	makefile := "run:\n\t" + bin + " -wasm " + pluginFile(t) + " -listen 127.0.0.1:0 -admin 127.0.0.1:0 -duration 1m -view lines\n"
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), []byte(makefile), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("script", "-qefc", "make --no-print-directory -C "+dir+" run; echo make-exit=$?", "/dev/null")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Ctrl-C once a frame of the view shows requests in flight in the
	// plugin (an event in the output, however long the start takes).
	inFlight := regexp.MustCompile(`pool \S+: [1-9]\d*/\d+ in flight`)
	hang := time.After(2 * time.Minute) // a guard against a hang, not a speed check
	for !strings.Contains(out.String(), "demo:     ") || !inFlight.MatchString(out.String()) {
		select {
		case <-hang:
			cmd.Process.Kill()
			t.Fatalf("no demo with requests in flight started:\n%s", out.String())
		case <-time.After(100 * time.Millisecond): // polling the output, not a window
		}
	}
	io.WriteString(stdin, "\x03")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-hang:
		cmd.Process.Kill()
		t.Fatalf("make run did not end after Ctrl-C:\n%s", out.String())
	}
	text := out.String()
	for _, want := range []string{"summary interrupted after", "make-exit=0"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "Interrupt") || strings.Contains(text, "***") {
		t.Errorf("make reported the interrupt:\n%s", text)
	}
}
