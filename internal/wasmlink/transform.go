package wasmlink

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Section ids of the Wasm binary format.
const (
	secCustom   = 0
	secType     = 1
	secImport   = 2
	secFunction = 3
	secTable    = 4
	secMemory   = 5
	secGlobal   = 6
	secExport   = 7
	secStart    = 8
	secElement  = 9
	secCode     = 10
	secData     = 11
)

// sectionRank is the order of the non-custom sections: the data count
// section (12) sits between element and code.
var sectionRank = map[byte]int{secType: 1, secImport: 2, secFunction: 3, secTable: 4, secMemory: 5,
	secGlobal: 6, secExport: 7, secStart: 8, secElement: 9, 12: 10, secCode: 11, secData: 12}

var header = []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}

type section struct {
	id      byte
	name    string // custom sections
	payload []byte // after the custom section's name
}

type funcType struct{ params, results []byte }

type importEntry struct {
	module, name string
	kind         byte
	typeIdx      uint32 // functions
	desc         []byte // the encoded description (after the kind byte)
}

// module is a decoded Wasm binary: its sections, and what the step needs of
// them.
type module struct {
	sections []section
	types    []funcType
	imports  []importEntry
	funcImps int  // imported functions
	memories bool // memory 0 exists (imported or defined)
	memory64 bool // memory 0 has 64-bit addresses
}

// Transform returns wasm with every wasi_snapshot_preview1 function import
// outside HostWASI, and fd_fdstat_get, replaced by a function defined in
// the module (see replacements). With no such import it returns a copy of wasm, having
// decoded only its section layout, types and imports. It fails on a WASI
// import it has no replacement for, on a replaced import whose type is not
// WASI's, on a module without a 32-bit memory 0 (the replacements use it),
// and on any part of the module it cannot decode completely.
//
// Function indices: with n function imports of which k are replaced, the
// n-k kept imports take indices 0..n-k-1 in their order, the k
// replacements are the first k defined functions (indices n-k..n-1, in the
// order of their imports), and every function the module defined keeps its
// index. Only references to imported functions are rewritten.
func Transform(wasm []byte) ([]byte, error) {
	m, err := decode(wasm)
	if err != nil {
		return nil, err
	}
	replaced, err := m.plan()
	if err != nil {
		return nil, err
	}
	if len(replaced) == 0 {
		return slices.Clone(wasm), nil
	}
	if !m.memories || m.memory64 {
		return nil, fmt.Errorf("wasmlink: the replacements need a 32-bit memory 0, and the module has none")
	}
	// newIdx[old] for every old imported function index.
	newIdx := make([]uint32, m.funcImps)
	fi := 0
	var keptIdx, replIdx []int // positions in m.imports
	for i, im := range m.imports {
		if im.kind != 0 {
			continue
		}
		if replaced[i] {
			replIdx = append(replIdx, fi)
		} else {
			keptIdx = append(keptIdx, fi)
		}
		fi++
	}
	for j, old := range keptIdx {
		newIdx[old] = uint32(j)
	}
	for j, old := range replIdx {
		newIdx[old] = uint32(len(keptIdx) + j)
	}
	total, err := m.funcCount()
	if err != nil {
		return nil, err
	}
	remap := func(old uint32) (uint32, bool) {
		if uint64(old) >= total {
			return 0, false
		}
		if int(old) < m.funcImps {
			return newIdx[old], true
		}
		return old, true
	}

	out := slices.Clone(header)
	for _, s := range m.sections {
		var p []byte
		switch s.id {
		case secImport:
			p = m.importSection(replaced)
		case secFunction:
			p, err = functionSection(s.payload, m, replaced)
		case secCode:
			p, err = codeSection(s.payload, m, replaced, remap)
		case secExport:
			p, err = exportSection(s.payload, remap)
		case secStart:
			p, err = startSection(s.payload, remap)
		case secElement:
			p, err = elementSection(s.payload, remap)
		case secGlobal:
			p, err = globalSection(s.payload, remap)
		case secCustom:
			if s.name == "name" {
				p, err = nameSection(s.payload, remap)
			} else {
				p = s.payload
			}
			p = append(appendName(nil, s.name), p...)
		default:
			p = s.payload
		}
		if err != nil {
			return nil, fmt.Errorf("wasmlink: %s section: %w", sectionName(s), err)
		}
		out = append(out, s.id)
		out = appendU32(out, uint32(len(p)))
		out = append(out, p...)
	}
	return out, nil
}

func sectionName(s section) string {
	if s.id == secCustom {
		return fmt.Sprintf("custom %q", s.name)
	}
	return fmt.Sprintf("id %d", s.id)
}

func decode(wasm []byte) (*module, error) {
	if len(wasm) < len(header) || !bytes.Equal(wasm[:len(header)], header) {
		return nil, fmt.Errorf("wasmlink: not a Wasm binary of version 1")
	}
	r := &reader{b: wasm, off: len(header)}
	m := &module{}
	last := 0
	for !r.done() {
		at := r.off
		id, _ := r.byte()
		size, err := r.u32()
		if err != nil {
			return nil, fmt.Errorf("wasmlink: section at offset %d: %w", at, err)
		}
		payload, err := r.bytes(size)
		if err != nil {
			return nil, fmt.Errorf("wasmlink: section %d at offset %d: %w", id, at, err)
		}
		s := section{id: id, payload: payload}
		switch {
		case id == secCustom:
			pr := &reader{b: payload}
			if s.name, err = pr.name(); err != nil {
				return nil, fmt.Errorf("wasmlink: custom section at offset %d: %w", at, err)
			}
			s.payload = payload[pr.off:]
			// Sections that hold code offsets or object-file relocations
			// would be stale once call immediates change length.
			if s.name == "linking" || strings.HasPrefix(s.name, "reloc.") || strings.HasPrefix(s.name, ".debug_") || s.name == "sourceMappingURL" {
				return nil, fmt.Errorf("wasmlink: custom section %q refers to code offsets or relocations the step does not rewrite", s.name)
			}
		default:
			rank, ok := sectionRank[id]
			if !ok {
				return nil, fmt.Errorf("wasmlink: unknown section id %d at offset %d", id, at)
			}
			if rank <= last {
				return nil, fmt.Errorf("wasmlink: section %d at offset %d out of order or repeated", id, at)
			}
			last = rank
		}
		switch id {
		case secType:
			err = m.decodeTypes(payload)
		case secImport:
			err = m.decodeImports(payload)
		case secMemory:
			pr := &reader{b: payload}
			var n uint32
			if n, err = pr.u32(); err == nil && n > 0 && !m.memories {
				m.memories = true
				m.memory64 = pr.off < len(payload) && payload[pr.off]&0x04 != 0
			}
		}
		if err != nil {
			return nil, fmt.Errorf("wasmlink: section %d: %w", id, err)
		}
		m.sections = append(m.sections, s)
	}
	return m, nil
}

func (m *module) decodeTypes(p []byte) error {
	r := &reader{b: p}
	n, err := r.count(3)
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		if form, err := r.byte(); err != nil {
			return err
		} else if form != 0x60 {
			return fmt.Errorf("type %d: form 0x%02x is not a function type", i, form)
		}
		var t funcType
		for _, vec := range []*[]byte{&t.params, &t.results} {
			k, err := r.count(1)
			if err != nil {
				return err
			}
			if *vec, err = r.bytes(k); err != nil {
				return err
			}
		}
		m.types = append(m.types, t)
	}
	if !r.done() {
		return fmt.Errorf("%d bytes after the last type", len(p)-r.off)
	}
	return nil
}

func (m *module) decodeImports(p []byte) error {
	r := &reader{b: p}
	n, err := r.count(4)
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		var im importEntry
		if im.module, err = r.name(); err != nil {
			return err
		}
		if im.name, err = r.name(); err != nil {
			return err
		}
		if im.kind, err = r.byte(); err != nil {
			return err
		}
		at := r.off
		switch im.kind {
		case 0: // function: type index
			if im.typeIdx, err = r.u32(); err != nil {
				return err
			}
			if int(im.typeIdx) >= len(m.types) {
				return fmt.Errorf("import %s.%s: type %d does not exist", im.module, im.name, im.typeIdx)
			}
			m.funcImps++
		case 1: // table: reftype, limits
			if _, err = r.byte(); err == nil {
				err = limits(r)
			}
		case 2: // memory: limits
			if !m.memories {
				m.memory64 = r.off < len(p) && p[r.off]&0x04 != 0
			}
			err = limits(r)
			m.memories = true
		case 3: // global: valtype, mutability
			_, err = r.bytes(2)
		default:
			return fmt.Errorf("import %s.%s: unknown kind %d", im.module, im.name, im.kind)
		}
		if err != nil {
			return fmt.Errorf("import %s.%s: %w", im.module, im.name, err)
		}
		im.desc = p[at:r.off]
		m.imports = append(m.imports, im)
	}
	if !r.done() {
		return fmt.Errorf("%d bytes after the last import", len(p)-r.off)
	}
	return nil
}

func limits(r *reader) error {
	flags, err := r.byte()
	if err != nil {
		return err
	}
	if flags&^0x07 != 0 {
		return fmt.Errorf("limits flags 0x%02x", flags)
	}
	bits := uint(32)
	if flags&0x04 != 0 {
		bits = 64
	}
	if _, err := r.leb(bits); err != nil {
		return err
	}
	if flags&0x01 != 0 {
		_, err = r.leb(bits)
	}
	return err
}

// plan decides which imports are replaced: replaced[i] for m.imports[i].
func (m *module) plan() (replaced map[int]bool, err error) {
	replaced = map[int]bool{}
	for i, im := range m.imports {
		if im.kind != 0 || im.module != WASIModule {
			continue
		}
		rep, ok := replacements[im.name]
		if !ok && slices.Contains(HostWASI, im.name) {
			continue
		}
		if !ok {
			return nil, fmt.Errorf("wasmlink: import %s.%s: not exported by every proxy-wasm host, and the step has no replacement for it", im.module, im.name)
		}
		t := m.types[im.typeIdx]
		if !bytes.Equal(t.params, rep.params) || !bytes.Equal(t.results, rep.results) {
			return nil, fmt.Errorf("wasmlink: import %s.%s has type %x -> %x, want WASI's %x -> %x", im.module, im.name, t.params, t.results, rep.params, rep.results)
		}
		replaced[i] = true
	}
	return replaced, nil
}

// funcCount is the size of the function index space: imported functions
// plus the entries of the function section.
func (m *module) funcCount() (uint64, error) {
	for _, s := range m.sections {
		if s.id == secFunction {
			r := &reader{b: s.payload}
			n, err := r.u32()
			if err != nil {
				return 0, fmt.Errorf("wasmlink: function section: %w", err)
			}
			return uint64(m.funcImps) + uint64(n), nil
		}
	}
	return uint64(m.funcImps), nil
}

func (m *module) importSection(replaced map[int]bool) []byte {
	n := len(m.imports) - len(replaced)
	p := appendU32(nil, uint32(n))
	for i, im := range m.imports {
		if replaced[i] {
			continue
		}
		p = appendName(p, im.module)
		p = appendName(p, im.name)
		p = append(p, im.kind)
		p = append(p, im.desc...)
	}
	return p
}

// replacedImports returns the imports replaced, in their order.
func (m *module) replacedImports(replaced map[int]bool) []importEntry {
	var out []importEntry
	for i, im := range m.imports {
		if replaced[i] {
			out = append(out, im)
		}
	}
	return out
}

// functionSection puts the replacements' type indices first.
func functionSection(p []byte, m *module, replaced map[int]bool) ([]byte, error) {
	r := &reader{b: p}
	n, err := r.count(1)
	if err != nil {
		return nil, err
	}
	reps := m.replacedImports(replaced)
	out := appendU32(nil, n+uint32(len(reps)))
	for _, im := range reps {
		out = appendU32(out, im.typeIdx)
	}
	for i := uint32(0); i < n; i++ {
		t, err := r.u32()
		if err != nil {
			return nil, err
		}
		out = appendU32(out, t)
	}
	if !r.done() {
		return nil, fmt.Errorf("%d bytes after the last entry", len(p)-r.off)
	}
	return out, nil
}

// codeSection puts the replacements' bodies first and rewrites the
// function indices of every other body.
func codeSection(p []byte, m *module, replaced map[int]bool, remap funcMap) ([]byte, error) {
	r := &reader{b: p}
	n, err := r.count(1)
	if err != nil {
		return nil, err
	}
	reps := m.replacedImports(replaced)
	out := appendU32(nil, n+uint32(len(reps)))
	for _, im := range reps {
		body := replacements[im.name].body
		out = appendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	var body []byte
	for i := uint32(0); i < n; i++ {
		size, err := r.u32()
		if err != nil {
			return nil, fmt.Errorf("body %d: %w", i, err)
		}
		b, err := r.bytes(size)
		if err != nil {
			return nil, fmt.Errorf("body %d: %w", i, err)
		}
		if body, err = rewriteBody(b, body[:0], remap); err != nil {
			return nil, fmt.Errorf("body %d: %w", i, err)
		}
		out = appendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	if !r.done() {
		return nil, fmt.Errorf("%d bytes after the last body", len(p)-r.off)
	}
	return out, nil
}

func rewriteBody(b, out []byte, remap funcMap) ([]byte, error) {
	r := &reader{b: b}
	groups, err := r.count(2)
	if err != nil {
		return nil, fmt.Errorf("locals: %w", err)
	}
	for g := uint32(0); g < groups; g++ {
		if _, err := r.u32(); err != nil {
			return nil, fmt.Errorf("locals: %w", err)
		}
		if _, err := r.byte(); err != nil {
			return nil, fmt.Errorf("locals: %w", err)
		}
	}
	out = append(out, b[:r.off]...)
	return rewriteInstrs(r, out, remap, true)
}

func exportSection(p []byte, remap funcMap) ([]byte, error) {
	r := &reader{b: p}
	n, err := r.count(3)
	if err != nil {
		return nil, err
	}
	out := appendU32(nil, n)
	for i := uint32(0); i < n; i++ {
		name, err := r.name()
		if err != nil {
			return nil, err
		}
		kind, err := r.byte()
		if err != nil {
			return nil, err
		}
		idx, err := r.u32()
		if err != nil {
			return nil, err
		}
		if kind == 0 {
			var ok bool
			if idx, ok = remap(idx); !ok {
				return nil, fmt.Errorf("export %q: function does not exist", name)
			}
		}
		out = appendName(out, name)
		out = append(out, kind)
		out = appendU32(out, idx)
	}
	if !r.done() {
		return nil, fmt.Errorf("%d bytes after the last export", len(p)-r.off)
	}
	return out, nil
}

func startSection(p []byte, remap funcMap) ([]byte, error) {
	r := &reader{b: p}
	idx, err := r.u32()
	if err != nil {
		return nil, err
	}
	if !r.done() {
		return nil, fmt.Errorf("%d bytes after the start function", len(p)-r.off)
	}
	nidx, ok := remap(idx)
	if !ok {
		return nil, fmt.Errorf("start function %d does not exist", idx)
	}
	return appendU32(nil, nidx), nil
}

func globalSection(p []byte, remap funcMap) ([]byte, error) {
	r := &reader{b: p}
	n, err := r.count(3)
	if err != nil {
		return nil, err
	}
	out := appendU32(nil, n)
	for i := uint32(0); i < n; i++ {
		t, err := r.bytes(2) // value type, mutability
		if err != nil {
			return nil, err
		}
		out = append(out, t...)
		if out, err = rewriteInstrs(r, out, remap, false); err != nil {
			return nil, fmt.Errorf("global %d: %w", i, err)
		}
	}
	if !r.done() {
		return nil, fmt.Errorf("%d bytes after the last global", len(p)-r.off)
	}
	return out, nil
}

// elementSection rewrites the function indices of element segments in all
// eight encodings (flags 0-7).
func elementSection(p []byte, remap funcMap) ([]byte, error) {
	r := &reader{b: p}
	n, err := r.count(2)
	if err != nil {
		return nil, err
	}
	out := appendU32(nil, n)
	for i := uint32(0); i < n; i++ {
		flags, err := r.u32()
		if err != nil {
			return nil, err
		}
		if flags > 7 {
			return nil, fmt.Errorf("segment %d: flags %d", i, flags)
		}
		out = appendU32(out, flags)
		if flags&0x02 != 0 && flags&0x01 == 0 { // 2, 6: explicit table index
			t, err := r.u32()
			if err != nil {
				return nil, err
			}
			out = appendU32(out, t)
		}
		if flags&0x01 == 0 { // active: offset expression
			if out, err = rewriteInstrs(r, out, remap, false); err != nil {
				return nil, fmt.Errorf("segment %d offset: %w", i, err)
			}
		}
		if flags&0x03 != 0 { // 1, 2, 3, 5, 6, 7: element kind or reference type
			k, err := r.byte()
			if err != nil {
				return nil, err
			}
			out = append(out, k)
		}
		cnt, err := r.count(1)
		if err != nil {
			return nil, fmt.Errorf("segment %d: %w", i, err)
		}
		out = appendU32(out, cnt)
		for j := uint32(0); j < cnt; j++ {
			if flags&0x04 != 0 { // expressions
				if out, err = rewriteInstrs(r, out, remap, false); err != nil {
					return nil, fmt.Errorf("segment %d element %d: %w", i, j, err)
				}
				continue
			}
			idx, err := r.u32()
			if err != nil {
				return nil, fmt.Errorf("segment %d element %d: %w", i, j, err)
			}
			nidx, ok := remap(idx)
			if !ok {
				return nil, fmt.Errorf("segment %d element %d: function %d does not exist", i, j, idx)
			}
			out = appendU32(out, nidx)
		}
	}
	if !r.done() {
		return nil, fmt.Errorf("%d bytes after the last segment", len(p)-r.off)
	}
	return out, nil
}

// nameSection rewrites the function indices of the function names (1),
// local names (2) and label names (3) subsections and keeps each map
// sorted by index, as the format requires; other subsections are copied.
func nameSection(p []byte, remap funcMap) ([]byte, error) {
	r := &reader{b: p}
	var out []byte
	for !r.done() {
		id, _ := r.byte()
		size, err := r.u32()
		if err != nil {
			return nil, err
		}
		sub, err := r.bytes(size)
		if err != nil {
			return nil, err
		}
		switch id {
		case 1:
			sub, err = nameMap(sub, remap, false)
		case 2, 3:
			sub, err = nameMap(sub, remap, true)
		}
		if err != nil {
			return nil, fmt.Errorf("subsection %d: %w", id, err)
		}
		out = append(out, id)
		out = appendU32(out, uint32(len(sub)))
		out = append(out, sub...)
	}
	return out, nil
}

// nameMap rewrites a name map (indirect: an indirect name map, whose
// inner maps are copied) keyed by function index.
func nameMap(p []byte, remap funcMap, indirect bool) ([]byte, error) {
	r := &reader{b: p}
	n, err := r.count(2)
	if err != nil {
		return nil, err
	}
	type entry struct {
		idx  uint32
		rest []byte
	}
	entries := make([]entry, 0, n)
	for i := uint32(0); i < n; i++ {
		idx, err := r.u32()
		if err != nil {
			return nil, err
		}
		start := r.off
		if indirect {
			k, err := r.count(2)
			if err != nil {
				return nil, err
			}
			for j := uint32(0); j < k; j++ {
				if _, err := r.u32(); err != nil {
					return nil, err
				}
				if _, err := r.name(); err != nil {
					return nil, err
				}
			}
		} else if _, err := r.name(); err != nil {
			return nil, err
		}
		nidx, ok := remap(idx)
		if !ok {
			return nil, fmt.Errorf("function %d does not exist", idx)
		}
		entries = append(entries, entry{nidx, p[start:r.off]})
	}
	if !r.done() {
		return nil, fmt.Errorf("%d bytes after the last name", len(p)-r.off)
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].idx < entries[j].idx })
	out := appendU32(nil, n)
	for _, e := range entries {
		out = appendU32(out, e.idx)
		out = append(out, e.rest...)
	}
	return out, nil
}
