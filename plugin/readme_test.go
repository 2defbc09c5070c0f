package plugin

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// configRow is one row of a documented list of configuration fields.
type configRow struct {
	field, def string // field path ("cluster.timeout"), default as written
	line       int
}

// readmeConfigTable returns the rows of README.md's configuration table
// (the table whose header is "| field | type | default | meaning |").
func readmeConfigTable(t *testing.T) []configRow {
	t.Helper()
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []configRow
	in := false
	for i, line := range strings.Split(string(data), "\n") {
		if line == "| field | type | default | meaning |" {
			in = true
			continue
		}
		if !in || strings.HasPrefix(line, "|---") {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			if len(rows) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 5 {
			t.Fatalf("README.md:%d: a configuration row with %d cells", i+1, len(cells))
		}
		rows = append(rows, configRow{field: strings.Trim(strings.TrimSpace(cells[1]), "`"), def: strings.TrimSpace(cells[3]), line: i + 1})
	}
	if len(rows) == 0 {
		t.Fatal("README.md: no configuration table (| field | type | default | meaning |)")
	}
	return rows
}

// docConfigList returns the rows of plugin/doc.go's "Fields and
// defaults:" list: its top-level fields with their defaults.
func docConfigList(t *testing.T) []configRow {
	t.Helper()
	data, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var rows []configRow
	in := false
	for i, line := range strings.Split(string(data), "\n") {
		if strings.HasSuffix(line, "Fields and defaults:") {
			in = true
			continue
		}
		if !in {
			continue
		}
		body, ok := strings.CutPrefix(line, "//\t")
		if !ok {
			if len(rows) > 0 {
				break
			}
			continue
		}
		if strings.HasPrefix(body, " ") {
			continue // a continuation line
		}
		field, rest, _ := strings.Cut(body, " ")
		rest = strings.TrimSpace(rest)
		def := ""
		if strings.HasPrefix(rest, `"`) {
			if end := strings.Index(rest[1:], `"`); end >= 0 {
				def = rest[:end+2]
			}
		} else if cols := splitColumns(rest); len(cols) > 0 {
			def = cols[0]
		}
		if def == "" {
			t.Fatalf("doc.go:%d: a field line without a default: %q", i+1, line)
		}
		rows = append(rows, configRow{field: field, def: def, line: i + 1})
	}
	if len(rows) == 0 {
		t.Fatal("doc.go: no \"Fields and defaults:\" list")
	}
	return rows
}

// splitColumns splits s at runs of two or more spaces.
func splitColumns(s string) []string {
	var out []string
	for _, c := range strings.Split(s, "  ") {
		if c = strings.TrimSpace(c); c != "" {
			out = append(out, c)
		}
	}
	return out
}

// parserFields returns the configuration fields the parser accepts, as
// README paths ("cluster.timeout", "pools[].capacity"; a team's fields as
// "pools[].teams.*.share"): the string cases of every switch over a key in
// config.go, cluster_config.go and capacity.go whose default answers "unknown field",
// each under the path of the function that holds the switch.
func parserFields(t *testing.T) []string {
	t.Helper()
	prefix := map[string]string{"parse": "", "parseCost": "cost.", "parseCluster": "cluster.", "parsePools": "pools[].", "parseTeams": "pools[].teams.*.", "parseCapacityFrom": "pools[].capacity_from."}
	var out []string
	fset := token.NewFileSet()
	for _, name := range []string{"config.go", "cluster_config.go", "capacity.go"} {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				sw, ok := n.(*ast.SwitchStmt)
				if !ok || !rejectsUnknown(sw) {
					return true
				}
				p, known := prefix[fn.Name.Name]
				if !known {
					t.Errorf("%s: %s has a switch over configuration fields: give it a path in parserFields", fset.Position(sw.Pos()), fn.Name.Name)
					return true
				}
				for _, s := range sw.Body.List {
					for _, e := range s.(*ast.CaseClause).List {
						if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
							v, _ := strconv.Unquote(lit.Value)
							out = append(out, p+v)
						}
					}
				}
				return true
			})
		}
	}
	if len(out) < 20 {
		t.Fatalf("parserFields found %d fields: the parser's switches are not where it looks", len(out))
	}
	return out
}

// rejectsUnknown reports whether the switch's default clause reports
// "unknown field".
func rejectsUnknown(sw *ast.SwitchStmt) bool {
	for _, s := range sw.Body.List {
		if cc := s.(*ast.CaseClause); cc.List == nil {
			found := false
			ast.Inspect(cc, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Value == `"unknown field"` {
					found = true
				}
				return true
			})
			return found
		}
	}
	return false
}

// withField returns a minimal valid configuration with the field at path
// (README's notation) set to the raw JSON value, or without it if raw is
// "".
func withField(t *testing.T, path, raw string) []byte {
	t.Helper()
	team := map[string]any{"share": 0.5}
	pool := map[string]any{"name": "p", "capacity": 4, "models": []any{"*"}, "teams": map[string]any{"a": team}}
	root := map[string]any{"pools": []any{pool}}
	cluster := map[string]any{"etcd_cluster": "etcd"}
	obj, key := root, path
	switch {
	case strings.HasPrefix(path, "pools[].capacity_from."):
		from := map[string]any{"cluster": "vllm"}
		pool["capacity_from"] = from
		obj, key = from, strings.TrimPrefix(path, "pools[].capacity_from.")
	case path == "pools[].max_users" || path == "pools[].user_active" || path == "pools[].user_idle":
		root["user_header"] = "x-user" // the user level's bounds need it on
		obj, key = pool, strings.TrimPrefix(path, "pools[].")
	case path == "pools[].throughput_burst":
		pool["throughput"] = 1000 // a burst needs the throughput it is of
		obj, key = pool, "throughput_burst"
	case strings.HasPrefix(path, "pools[].teams.*."):
		obj, key = team, strings.TrimPrefix(path, "pools[].teams.*.")
	case strings.HasPrefix(path, "pools[]."):
		obj, key = pool, strings.TrimPrefix(path, "pools[].")
	case strings.HasPrefix(path, "cluster."):
		root["cluster"] = cluster
		obj, key = cluster, strings.TrimPrefix(path, "cluster.")
	}
	if raw == "" {
		delete(obj, key)
	} else {
		obj[key] = json.RawMessage(raw)
	}
	b, err := json.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// jsonDefault returns the default as a JSON value if it is one (between
// backticks or bare), else "".
func jsonDefault(def string) string {
	d := strings.Trim(def, "`")
	if json.Valid([]byte(d)) {
		return d
	}
	return ""
}

// proseDefaults are the defaults written in words, with the JSON value the
// parser's default equals (or "" for a required field or one absent by
// default, checked as such).
var proseDefaults = map[string]string{
	"every vLLM endpoint that takes `priority` (below)": "",
	"5 × `tick`":     `"5s"`, // holder_timeout with the default tick of 1s
	"required":       "",
	"absent":         "",
	"`etcd_cluster`": `"etcd"`, // cluster.authority: the etcd_cluster of withField
	"random":         "",
	"3 × `interval`": `"15s"`,  // capacity_from.expire with the default interval of 5s
	"`cluster`":      `"vllm"`, // capacity_from.authority: the cluster of withField
}

// TestREADMEConfigTable checks README.md's configuration table against the
// parser, both ways: every field the parser accepts has a row, every row
// names a field the parser accepts, and each default written as a JSON
// value is what the parser takes when the field is left out (the
// configuration with the field set to it parses to the same config as
// the one without it).
func TestREADMEConfigTable(t *testing.T) {
	checkConfigRows(t, "README.md", readmeConfigTable(t), parserFields(t))
	// The team fields are written inside the pools[].teams row.
	for _, f := range parserFields(t) {
		if k, ok := strings.CutPrefix(f, "pools[].teams.*."); ok && !readmeTeamFields(t)[k] {
			t.Errorf("README.md: the pools[].teams row does not name the team field %q the parser accepts", k)
		}
	}
	for k := range readmeTeamFields(t) {
		if !slices.Contains(parserFields(t), "pools[].teams.*."+k) {
			t.Errorf("README.md: the pools[].teams row names %q, which the parser does not accept", k)
		}
	}
}

// TestDocConfigList checks plugin/doc.go's list of fields and defaults
// against the parser's top-level fields, as TestREADMEConfigTable does.
func TestDocConfigList(t *testing.T) {
	var top []string
	for _, f := range parserFields(t) {
		if !strings.ContainsAny(f, ".[") {
			top = append(top, f)
		}
	}
	rows := docConfigList(t)
	for i := range rows {
		switch rows[i].def {
		case "DefaultPaths":
			rows[i].def = "every vLLM endpoint that takes `priority` (below)"
		case "5 × tick":
			rows[i].def = "5 × `tick`"
		case "(required)":
			rows[i].def = "required"
		case "{1, 1, 2}":
			rows[i].def = `{"prompt_token": 1, "cached_prompt_token": 1, "completion_token": 2}`
		}
	}
	checkConfigRows(t, "plugin/doc.go", rows, top)
}

// readmeTeamFields returns the keys of the team object written in the
// README's pools[].teams row ({"share": s, "weight": w, ...}).
func readmeTeamFields(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "| `pools[].teams` |") {
			continue
		}
		_, obj, _ := strings.Cut(line, "`{")
		obj, _, _ = strings.Cut(obj, "}`")
		out := map[string]bool{}
		for _, kv := range strings.Split(obj, ",") {
			k, _, _ := strings.Cut(kv, ":")
			out[strings.Trim(strings.TrimSpace(k), `"`)] = true
		}
		return out
	}
	t.Fatal("README.md: no pools[].teams row")
	return nil
}

// checkConfigRows checks the documented rows against the parser's fields
// (want), both ways, and every default against the parser.
func checkConfigRows(t *testing.T, doc string, rows []configRow, want []string) {
	t.Helper()
	documented := map[string]bool{}
	for _, r := range rows {
		if documented[r.field] {
			t.Errorf("%s:%d: field %s documented twice", doc, r.line, r.field)
		}
		documented[r.field] = true
		if !slices.Contains(want, r.field) {
			t.Errorf("%s:%d: field %s is not one the parser accepts", doc, r.line, r.field)
			continue
		}
		def := jsonDefault(r.def)
		if p, ok := proseDefaults[r.def]; ok {
			def = p
		} else if def == "" {
			t.Errorf("%s:%d: field %s: default %q is neither a JSON value nor a known phrase", doc, r.line, r.field, r.def)
			continue
		}
		if def == "" {
			continue
		}
		got, err := parse(withField(t, r.field, def))
		if err != nil {
			t.Errorf("%s:%d: field %s set to its documented default %s: %v", doc, r.line, r.field, def, err)
			continue
		}
		without, err := parse(withField(t, r.field, ""))
		if err != nil {
			t.Errorf("%s:%d: field %s left out: %v", doc, r.line, r.field, err)
			continue
		}
		if !reflect.DeepEqual(got, without) {
			t.Errorf("%s:%d: field %s: documented default %s is not the parser's default:\nset:     %+v\nomitted: %+v", doc, r.line, r.field, def, got, without)
		}
	}
	costKeys := map[string]any{}
	for _, r := range rows {
		if r.field == "cost" {
			if err := json.Unmarshal([]byte(jsonDefault(r.def)), &costKeys); err != nil {
				t.Errorf("%s:%d: cost's default %q is not a JSON object: %v", doc, r.line, r.def, err)
			}
		}
	}
	for _, f := range want {
		if strings.HasPrefix(f, "pools[].teams.*.") {
			continue // written inside the pools[].teams row
		}
		if k, ok := strings.CutPrefix(f, "cost."); ok {
			if _, found := costKeys[k]; !found {
				t.Errorf("%s: the parser accepts %s, which the cost row's default does not name", doc, f)
			}
			continue
		}
		if !documented[f] {
			t.Errorf("%s: the parser accepts %s, which has no row", doc, f)
		}
	}
}

// TestSuggestionFieldsMatchParser: the field lists behind "did you mean"
// (suggest.go) are exactly the fields the parser accepts at each path, so a
// field added to the parser is also suggested.
func TestSuggestionFieldsMatchParser(t *testing.T) {
	lists := map[string][]string{"": rootFields, "cost.": costFields, "cluster.": clusterFields,
		"pools[].": poolFields, "pools[].teams.*.": teamFields, "pools[].capacity_from.": capacityFromFields}
	want := map[string][]string{}
	for _, f := range parserFields(t) {
		prefix, name := "", f
		for p := range lists {
			if p != "" && strings.HasPrefix(f, p) && len(p) > len(prefix) {
				prefix, name = p, strings.TrimPrefix(f, p)
			}
		}
		want[prefix] = append(want[prefix], name)
	}
	for p, got := range lists {
		w := want[p]
		slices.Sort(w)
		g := slices.Sorted(slices.Values(got))
		if !slices.Equal(g, w) {
			t.Errorf("suggest.go's fields at %q are %v; the parser accepts %v", p, g, w)
		}
	}
}
