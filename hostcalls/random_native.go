//go:build !wasip1

package hostcalls

import "errors"

// randomGet has no host outside Wasm: RandomUint64 falls back to
// math/rand/v2.
func randomGet([]byte) error { return errNoHostRandom }

var errNoHostRandom = errors.New("hostcalls: no host random source outside Wasm")
