package hostcalls

import (
	"errors"
	"fmt"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// Errors for the Status codes that the SDK's types package has no error for.
// The other codes map to the SDK's errors (see Status.Err).
var (
	// ErrorStatusSerializationFailure is SERIALIZATION_FAILURE (3).
	ErrorStatusSerializationFailure = errors.New("error status returned by host: serialization failure")
	// ErrorStatusParseFailure is PARSE_FAILURE (4).
	ErrorStatusParseFailure = errors.New("error status returned by host: parse failure")
	// ErrorStatusInvalidMemoryAccess is INVALID_MEMORY_ACCESS (6). The guest
	// also reports it when the host answers with a pointer its allocator did
	// not hand out.
	ErrorStatusInvalidMemoryAccess = errors.New("error status returned by host: invalid memory access")
	// ErrorStatusBrokenConnection is BROKEN_CONNECTION (11).
	ErrorStatusBrokenConnection = errors.New("error status returned by host: broken connection")
)

// StatusError is the error for a Status code that has no sentinel error.
type StatusError Status

// Error implements error.
func (e StatusError) Error() string {
	return fmt.Sprintf("error status returned by host: %s", Status(e))
}

var statusNames = [...]string{
	StatusOK:                   "OK",
	StatusNotFound:             "NOT_FOUND",
	StatusBadArgument:          "BAD_ARGUMENT",
	StatusSerializationFailure: "SERIALIZATION_FAILURE",
	StatusParseFailure:         "PARSE_FAILURE",
	5:                          "BAD_EXPRESSION",
	StatusInvalidMemoryAccess:  "INVALID_MEMORY_ACCESS",
	StatusEmpty:                "EMPTY",
	StatusCASMismatch:          "CAS_MISMATCH",
	9:                          "RESULT_MISMATCH",
	StatusInternalFailure:      "INTERNAL_FAILURE",
	StatusBrokenConnection:     "BROKEN_CONNECTION",
	StatusUnimplemented:        "UNIMPLEMENTED",
}

// String returns the spec's name of s ("OK", "NOT_FOUND", "CAS_MISMATCH", ...)
// or "STATUS(n)" for a code the spec does not name.
func (s Status) String() string {
	if int(s) < len(statusNames) && statusNames[s] != "" {
		return statusNames[s]
	}
	return fmt.Sprintf("STATUS(%d)", uint32(s))
}

// Err returns nil for StatusOK and otherwise the error a wrapper returns for
// s: the SDK's types.ErrorStatusNotFound, ErrorStatusBadArgument,
// ErrorStatusEmpty, ErrorStatusCasMismatch, ErrorInternalFailure and
// ErrorUnimplemented, this package's ErrorStatus* for codes 3, 4, 6 and 11,
// and a StatusError for any other code.
func (s Status) Err() error {
	switch s {
	case StatusOK:
		return nil
	case StatusNotFound:
		return types.ErrorStatusNotFound
	case StatusBadArgument:
		return types.ErrorStatusBadArgument
	case StatusSerializationFailure:
		return ErrorStatusSerializationFailure
	case StatusParseFailure:
		return ErrorStatusParseFailure
	case StatusInvalidMemoryAccess:
		return ErrorStatusInvalidMemoryAccess
	case StatusEmpty:
		return types.ErrorStatusEmpty
	case StatusCASMismatch:
		return types.ErrorStatusCasMismatch
	case StatusInternalFailure:
		return types.ErrorInternalFailure
	case StatusBrokenConnection:
		return ErrorStatusBrokenConnection
	case StatusUnimplemented:
		return types.ErrorUnimplemented
	}
	return StatusError(s)
}

// StatusOf is the inverse of Status.Err: the Status that err stands for.
// nil is StatusOK; an error that is none of those Status.Err returns (nor
// wraps one) is StatusInternalFailure.
func StatusOf(err error) Status {
	if err == nil {
		return StatusOK
	}
	var se StatusError
	if errors.As(err, &se) {
		return Status(se)
	}
	for s := StatusNotFound; s <= StatusUnimplemented; s++ {
		if e, ok := s.Err().(StatusError); ok && e == StatusError(s) {
			continue
		}
		if errors.Is(err, s.Err()) {
			return s
		}
	}
	return StatusInternalFailure
}
