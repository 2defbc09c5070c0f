package wasmlink_test

import "slices"

// A small assembler for the hand-written test modules.

func u32(v uint32) []byte {
	var b []byte
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// padded is v as a five-byte LEB128, as Go's linker writes call targets.
func padded(v uint32) []byte {
	return []byte{byte(v) | 0x80, byte(v>>7) | 0x80, byte(v>>14) | 0x80, byte(v>>21) | 0x80, byte(v >> 28)}
}

func cat(parts ...[]byte) []byte { return slices.Concat(parts...) }

func str(s string) []byte { return cat(u32(uint32(len(s))), []byte(s)) }

func vec(items ...[]byte) []byte { return cat(u32(uint32(len(items))), cat(items...)) }

func sec(id byte, payload ...[]byte) []byte {
	p := cat(payload...)
	return cat([]byte{id}, u32(uint32(len(p))), p)
}

func custom(name string, payload ...[]byte) []byte { return sec(0, str(name), cat(payload...)) }

func wasmModule(sections ...[]byte) []byte {
	return cat([]byte{0, 'a', 's', 'm', 1, 0, 0, 0}, cat(sections...))
}

const (
	tI32 = 0x7f
	tI64 = 0x7e
)

func functype(params, results []byte) []byte {
	return cat([]byte{0x60}, vec(bytesOf(params)...), vec(bytesOf(results)...))
}

func bytesOf(b []byte) [][]byte {
	out := make([][]byte, len(b))
	for i := range b {
		out[i] = b[i : i+1]
	}
	return out
}

func funcImport(module, name string, typ uint32) []byte {
	return cat(str(module), str(name), []byte{0}, u32(typ))
}

// body is a function body without locals; code must end with 0x0b.
func body(code ...[]byte) []byte {
	b := cat([]byte{0}, cat(code...))
	return cat(u32(uint32(len(b))), b)
}

func export(name string, kind byte, idx uint32) []byte {
	return cat(str(name), []byte{kind}, u32(idx))
}

func i32const(v byte) []byte { return []byte{0x41, v} } // v < 64

func call(idx uint32) []byte { return cat([]byte{0x10}, u32(idx)) }

func callPadded(idx uint32) []byte { return cat([]byte{0x10}, padded(idx)) }

func localGet(i byte) []byte { return []byte{0x20, i} }

func callIndirect(typ uint32) []byte { return cat([]byte{0x11}, u32(typ), []byte{0}) }

var end = []byte{0x0b}

func nameMap(names map[uint32]string, order []uint32) []byte {
	var items [][]byte
	for _, i := range order {
		items = append(items, cat(u32(i), str(names[i])))
	}
	return vec(items...)
}
