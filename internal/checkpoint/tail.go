package checkpoint

import (
	"strings"
	"sync"
)

// tailBuffer keeps the last max bytes written to it: a child's stderr,
// quoted in errors.
type tailBuffer struct {
	mu   sync.Mutex
	max  int
	b    []byte
	lost bool // bytes were dropped from the front
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
		t.lost = true
	}
	return len(p), nil
}

// String returns the tail, trimmed, marked with "..." when cut.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.b))
	if t.lost && s != "" {
		s = "..." + s
	}
	return s
}
