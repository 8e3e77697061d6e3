package thawqueue

import "fmt"

// NoRoom is a thaw not admitted: its memory is not free, or another thaw
// holds its GPU.
type NoRoom struct {
	Why     string // the GPUs short, by index, for humans
	Expired bool   // it waited its whole wait
}

func (e *NoRoom) Error() string { return e.Why }

// Missing is a thaw onto a GPU the sample lacks.
type Missing struct{ UUID string }

func (e *Missing) Error() string { return fmt.Sprintf("GPU %s is not present", e.UUID) }
