package checkpoint

import (
	"errors"
	"testing"
)

func TestResultClass(t *testing.T) {
	for _, tc := range []struct {
		op    string
		r     cuResult
		pairs bool
		want  error
	}{
		{"restore", cuErrOutOfMemory, false, ErrOutOfMemory},
		{"lock", cuErrTimeout, false, ErrTimeout},
		{"lock", cuErrNotReady, false, ErrTimeout},
		{"checkpoint", cuErrNotReady, false, ErrFailed},
		{"unlock", cuErrIllegalState, false, ErrIllegalState},
		{"restore", cuErrInvalidValue, true, ErrRejected},
		{"restore", cuErrInvalidValue, false, ErrNotCUDA},
		{"get-state", cuErrInvalidValue, false, ErrNotCUDA},
		{"get-state", cuErrNotInit, false, ErrNotCUDA},
		{"lock", cuErrNoDevice, false, ErrNotCUDA},
		{"checkpoint", cuErrNotSupported, false, ErrNotCheckpointable},
		{"restore", cuErrOS, false, ErrFailed},
		{"lock", cuErrNotPermitted, false, ErrFailed},
		{"lock", cuErrUnknown, false, ErrFailed},
		{"lock", 46, false, ErrFailed},
	} {
		if got := resultClass(tc.op, tc.r, tc.pairs); got != tc.want {
			t.Errorf("resultClass(%s, %d, pairs %v) = %v, want %v", tc.op, tc.r, tc.pairs, got, tc.want)
		}
	}
	for _, class := range []error{ErrTimeout, ErrOutOfMemory, ErrIllegalState, ErrNotCUDA, ErrNotCheckpointable, ErrRejected, ErrFailed} {
		if got := classErr(className(class)); got != class {
			t.Errorf("class %q round trip = %v, want %v", className(class), got, class)
		}
	}
	if got := classErr(className(ErrUnsupported)); !errors.Is(got, ErrUnsupported) {
		t.Errorf("unsupported round trip = %v", got)
	}
	if got := resultName(cuErrTimeout); got != "CUDA_ERROR_TIMEOUT" {
		t.Errorf("resultName(909) = %q", got)
	}
	if got := resultName(46); got != "CUresult 46" {
		t.Errorf("resultName(46) = %q", got)
	}
}

// TestToolStatusesUnique checks that each known CUresult keeps a distinct
// exit status once the kernel cuts it to 8 bits, so that the status can
// stand in for a text the table lacks.
func TestToolStatusesUnique(t *testing.T) {
	seen := map[int]cuResult{}
	for _, e := range cuErrors {
		if other, ok := seen[int(e.r)&0xff]; ok {
			t.Errorf("%s and CUresult %d both exit %d", e.name, other, int(e.r)&0xff)
		}
		seen[int(e.r)&0xff] = e.r
	}
}
