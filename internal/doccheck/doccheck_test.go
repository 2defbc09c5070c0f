package doccheck

import (
	"bytes"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// moduleRoot returns the directory of go.mod above the test's directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}

// textFiles returns every text file of the repository (relative paths),
// walking from the module root; .git and build/ are skipped, and so is
// every file with a NUL byte in its first 8 KiB (images, plugin.wasm).
func textFiles(t *testing.T, root string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == ".git" || rel == "build" {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.IndexByte(data[:min(len(data), 8192)], 0) >= 0 {
			return nil
		}
		out[filepath.ToSlash(rel)] = data
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// privateNotes are the ways the repository's files used to cite notes
// that live outside it (a shared directory next to the checkout, its
// reference files and its design and style notes). Users do not have
// them: a fact must cite its public source (repository, file, commit) or
// be stated in the repository's own words. Each is written split so that
// this file does not cite them itself.
var privateNotes = []string{
	"shared" + "/reference",
	"../" + "shared",
	"reference" + " §",
	"reference" + "/proxy-wasm.md",
	"reference" + "/vllm.md",
	"reference " + "vllm.md",
	"reference " + "proxy-wasm.md",
	"anchors" + ".md",
	"DESIGN" + "-NOTES.md",
	"STYLE" + ".md",
	"seeds" + "/0",
}

// TestNoCitationOfPrivateNotes fails for every line of a text file that
// cites notes users do not have.
func TestNoCitationOfPrivateNotes(t *testing.T) {
	files := textFiles(t, moduleRoot(t))
	if _, ok := files["README.md"]; !ok {
		t.Fatal("README.md not found: the walk does not start at the module root")
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		for i, line := range strings.Split(string(files[name]), "\n") {
			for _, p := range privateNotes {
				if strings.Contains(line, p) {
					t.Errorf("%s:%d cites %q, which users do not have (cite the public source or state the fact): %s", name, i+1, p, strings.TrimSpace(line))
				}
			}
		}
	}
}
