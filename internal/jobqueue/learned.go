package jobqueue

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/gpusched/gpusched/internal/store"
)

// Learned remembers the peak VRAM per GPU of finished runs of a command,
// per user, for vram=auto. It is one small file, rewritten atomically.
type Learned struct {
	path string
	mu   sync.Mutex
	m    map[string]uint64
}

// OpenLearned loads path; a missing file is an empty memory.
func OpenLearned(path string) (*Learned, error) {
	l := &Learned{path: path, m: map[string]uint64{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &l.m); err != nil {
		return nil, fmt.Errorf("learned declarations %s: %w", path, err)
	}
	if l.m == nil { // the file held null
		l.m = map[string]uint64{}
	}
	return l, nil
}

func learnedKey(uid uint32, cmd []string) string {
	return strconv.FormatUint(uint64(uid), 10) + "\x00" + strings.Join(cmd, "\x00")
}

// Get returns the remembered peak of cmd run by uid.
func (l *Learned) Get(uid uint32, cmd []string) (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.m[learnedKey(uid, cmd)]
	return v, ok
}

// Put remembers peak for cmd run by uid.
func (l *Learned) Put(uid uint32, cmd []string, peak uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.m[learnedKey(uid, cmd)] = peak
	b, err := json.Marshal(l.m)
	if err != nil {
		return err
	}
	return store.WriteFile(l.path, b, 0o600)
}
