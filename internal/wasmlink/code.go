package wasmlink

import "fmt"

// funcMap maps an old function index to its new one; ok is false for an
// index outside the function index space.
type funcMap func(old uint32) (idx uint32, ok bool)

// rewriteInstrs copies the instructions of r, from r.off, to out and
// rewrites the function index of every call, return_call and ref.func
// through remap. The bytes of an instruction are copied as they are,
// except an index that changes, which is written back as a canonical
// LEB128. It stops after the end that closes the outermost block: for a
// function body that end must be the body's last byte (r.b ends there),
// for a constant expression it is the expression's end.
//
// The decoder knows every instruction Go's linker emits for GOARCH=wasm:
// the MVP set, sign extension (0xc0-0xc4), saturating truncation
// (0xfc 0-7) and bulk memory (0xfc 8-17, with the table instructions of
// reference types, 0x25/0x26 and 0xd0-0xd2). Any other opcode (SIMD 0xfd,
// threads 0xfe, exceptions, typed references, ...) is an error, not a
// guess: the step would otherwise miss an index or copy a wrong length.
func rewriteInstrs(r *reader, out []byte, remap funcMap, body bool) ([]byte, error) {
	depth := 0
	for {
		start := r.off
		op, err := r.byte()
		if err != nil {
			return nil, fmt.Errorf("instruction at offset %d: %w", start, err)
		}
		copyFrom := start // bytes [copyFrom, r.off) are copied as they are
		switch {
		case op == 0x02 || op == 0x03 || op == 0x04: // block, loop, if
			if err := blockType(r); err != nil {
				return nil, fmt.Errorf("block type at offset %d: %w", start, err)
			}
			depth++
		case op == 0x0b: // end
			if depth == 0 {
				out = append(out, r.b[copyFrom:r.off]...)
				if body && !r.done() {
					return nil, fmt.Errorf("function body ends at offset %d, before its last byte", start)
				}
				return out, nil
			}
			depth--
		case op == 0x00 || op == 0x01 || op == 0x05 || op == 0x0f: // unreachable, nop, else, return
		case op == 0x0c || op == 0x0d: // br, br_if
			_, err = r.u32()
		case op == 0x0e: // br_table
			var n uint32
			if n, err = r.count(1); err == nil {
				for i := uint32(0); i <= n && err == nil; i++ {
					_, err = r.u32()
				}
			}
		case op == 0x10 || op == 0x12 || op == 0xd2: // call, return_call, ref.func
			out = append(out, r.b[copyFrom:r.off]...)
			idxStart := r.off
			var idx uint32
			if idx, err = r.u32(); err != nil {
				break
			}
			nidx, ok := remap(idx)
			if !ok {
				return nil, fmt.Errorf("instruction 0x%02x at offset %d: function %d does not exist", op, start, idx)
			}
			if nidx != idx {
				out = appendU32(out, nidx)
			} else {
				out = append(out, r.b[idxStart:r.off]...)
			}
			continue
		case op == 0x11 || op == 0x13: // call_indirect, return_call_indirect: type, table
			if _, err = r.u32(); err == nil {
				_, err = r.u32()
			}
		case op == 0x1a || op == 0x1b: // drop, select
		case op == 0x1c: // select t*
			var n uint32
			if n, err = r.count(1); err == nil {
				_, err = r.bytes(n)
			}
		case op >= 0x20 && op <= 0x26: // local.get/set/tee, global.get/set, table.get/set
			_, err = r.u32()
		case op >= 0x28 && op <= 0x3e: // loads and stores
			err = memarg(r)
		case op == 0x3f || op == 0x40: // memory.size, memory.grow
			_, err = r.u32()
		case op == 0x41: // i32.const
			err = r.sleb(32)
		case op == 0x42: // i64.const
			err = r.sleb(64)
		case op == 0x43: // f32.const
			_, err = r.bytes(4)
		case op == 0x44: // f64.const
			_, err = r.bytes(8)
		case op >= 0x45 && op <= 0xc4: // numeric, conversions, sign extension
		case op == 0xd0: // ref.null t
			_, err = r.byte()
		case op == 0xd1: // ref.is_null
		case op == 0xfc:
			err = prefixFC(r)
		default:
			return nil, fmt.Errorf("unknown opcode 0x%02x at offset %d", op, start)
		}
		if err != nil {
			return nil, fmt.Errorf("instruction 0x%02x at offset %d: %w", op, start, err)
		}
		out = append(out, r.b[copyFrom:r.off]...)
	}
}

// blockType skips a block type: 0x40 (empty), a value type, or a type
// index as a signed 33-bit LEB128.
func blockType(r *reader) error {
	if r.done() {
		return errShort
	}
	switch r.b[r.off] {
	case 0x40, 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
		r.off++
		return nil
	}
	return r.sleb(33)
}

// memarg skips a memory argument: alignment (bit 6 set: a memory index
// follows) and offset.
func memarg(r *reader) error {
	align, err := r.u32()
	if err != nil {
		return err
	}
	if align&0x40 != 0 {
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	_, err = r.leb(64)
	return err
}

// prefixFC skips the immediates of a 0xfc instruction: saturating
// truncation (0-7), bulk memory and table instructions (8-17).
func prefixFC(r *reader) error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	n := 0 // number of u32 immediates
	switch {
	case sub <= 7: // i32/i64.trunc_sat_f32/f64_s/u
	case sub == 8: // memory.init data, mem
		n = 2
	case sub == 9: // data.drop data
		n = 1
	case sub == 10: // memory.copy mem, mem
		n = 2
	case sub == 11: // memory.fill mem
		n = 1
	case sub == 12: // table.init elem, table
		n = 2
	case sub == 13: // elem.drop elem
		n = 1
	case sub == 14: // table.copy table, table
		n = 2
	case sub == 15 || sub == 16 || sub == 17: // table.grow, table.size, table.fill
		n = 1
	default:
		return fmt.Errorf("unknown instruction 0xfc %d", sub)
	}
	for i := 0; i < n; i++ {
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	return nil
}
