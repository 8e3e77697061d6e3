package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
)

// GPURef names a GPU by index (a JSON number or a string of digits) or by
// UUID (a string).
type GPURef struct {
	Index int    // valid when UUID == ""
	UUID  string // "GPU-..." when named by UUID
}

// ParseGPURef reads "3" as an index and anything else as a UUID.
func ParseGPURef(s string) (GPURef, error) {
	if s == "" {
		return GPURef{}, fmt.Errorf("empty GPU reference")
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n < 0 {
			return GPURef{}, fmt.Errorf("GPU index %d is negative", n)
		}
		return GPURef{Index: n}, nil
	}
	return GPURef{UUID: s}, nil
}

func (g GPURef) String() string {
	if g.UUID != "" {
		return g.UUID
	}
	return strconv.Itoa(g.Index)
}

// MarshalJSON writes an index as a number and a UUID as a string.
func (g GPURef) MarshalJSON() ([]byte, error) {
	if g.UUID != "" {
		return json.Marshal(g.UUID)
	}
	return []byte(strconv.Itoa(g.Index)), nil
}

// UnmarshalJSON accepts a number or a string.
func (g *GPURef) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		r, err := ParseGPURef(s)
		if err != nil {
			return err
		}
		*g = r
		return nil
	}
	var n int
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("GPU reference must be an index or a UUID string, got %s", b)
	}
	if n < 0 {
		return fmt.Errorf("GPU index %d is negative", n)
	}
	*g = GPURef{Index: n}
	return nil
}

// Duration is a time.Duration on the wire: a number of seconds or a Go
// duration string ("1.5s", "2h"); it is written as a string.
type Duration time.Duration

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// maxDurationSeconds is the first number of seconds a Duration cannot
// hold (time.Duration's nanoseconds past int64).
const maxDurationSeconds = float64(math.MaxInt64) / float64(time.Second)

// UnmarshalJSON accepts seconds (number) or a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("bad duration %q: want a number of seconds or a string like \"10s\"", s)
		}
		if v < 0 {
			return fmt.Errorf("duration %q is negative", s)
		}
		*d = Duration(v)
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil {
		return fmt.Errorf("bad duration %s: want a number of seconds or a string like \"10s\"", b)
	}
	if secs < 0 {
		return fmt.Errorf("duration %v is negative", secs)
	}
	if secs >= maxDurationSeconds {
		return fmt.Errorf("duration %v s is too long: at most %.0f s (292 years)", secs, maxDurationSeconds)
	}
	*d = Duration(secs * float64(time.Second))
	return nil
}
