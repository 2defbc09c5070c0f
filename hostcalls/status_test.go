package hostcalls

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

func TestStatusErrRoundTrip(t *testing.T) {
	tests := []struct {
		s    Status
		name string
		err  error
	}{
		{StatusOK, "OK", nil},
		{StatusNotFound, "NOT_FOUND", types.ErrorStatusNotFound},
		{StatusBadArgument, "BAD_ARGUMENT", types.ErrorStatusBadArgument},
		{StatusSerializationFailure, "SERIALIZATION_FAILURE", ErrorStatusSerializationFailure},
		{StatusParseFailure, "PARSE_FAILURE", ErrorStatusParseFailure},
		{5, "BAD_EXPRESSION", StatusError(5)},
		{StatusInvalidMemoryAccess, "INVALID_MEMORY_ACCESS", ErrorStatusInvalidMemoryAccess},
		{StatusEmpty, "EMPTY", types.ErrorStatusEmpty},
		{StatusCASMismatch, "CAS_MISMATCH", types.ErrorStatusCasMismatch},
		{9, "RESULT_MISMATCH", StatusError(9)},
		{StatusInternalFailure, "INTERNAL_FAILURE", types.ErrorInternalFailure},
		{StatusBrokenConnection, "BROKEN_CONNECTION", ErrorStatusBrokenConnection},
		{StatusUnimplemented, "UNIMPLEMENTED", types.ErrorUnimplemented},
		{99, "STATUS(99)", StatusError(99)},
	}
	for _, tt := range tests {
		if got := tt.s.String(); got != tt.name {
			t.Errorf("Status(%d).String() = %q, want %q", uint32(tt.s), got, tt.name)
		}
		err := tt.s.Err()
		if err != tt.err {
			t.Errorf("Status(%d).Err() = %v, want %v", uint32(tt.s), err, tt.err)
		}
		if got := StatusOf(err); got != tt.s {
			t.Errorf("StatusOf(%v) = %v, want %v", err, got, tt.s)
		}
		if err != nil {
			if got := StatusOf(fmt.Errorf("context: %w", err)); got != tt.s {
				t.Errorf("StatusOf(wrapped %v) = %v, want %v", err, got, tt.s)
			}
		}
	}
	if got := StatusOf(errors.New("other")); got != StatusInternalFailure {
		t.Errorf("StatusOf(other) = %v, want INTERNAL_FAILURE", got)
	}
}
