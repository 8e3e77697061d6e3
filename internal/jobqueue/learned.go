package jobqueue

import (
	"crypto/sha256"
	"encoding/hex"
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

// LearnedPerUser is how many commands Learned remembers per user: the ones
// learned last. Without a bound one user's jobs of distinct commands (each
// 256 KiB, up to --max-jobs-per-user at a time, forever) grew the daemon's
// memory and the file it rewrites at each job's end without limit.
const LearnedPerUser = 256

// Learned remembers the peak VRAM per GPU of finished runs of a command,
// per user, for vram=auto: the LearnedPerUser commands of each user learned
// last, each by a digest of the command. It is one small file, rewritten
// atomically.
type Learned struct {
	path string
	mu   sync.Mutex
	m    map[string]learnedPeak // learnedKey -> peak
	seq  uint64                 // the last Put's
}

// learnedPeak is one command's peak and when it was learned.
type learnedPeak struct {
	Peak uint64 `json:"peak"`
	Seq  uint64 `json:"seq"`
}

// learnedFile is the file's form; a file of an earlier daemon is a map of
// "uid NUL arg NUL arg ..." to the peak.
type learnedFile struct {
	Version int                    `json:"version"`
	Peaks   map[string]learnedPeak `json:"peaks"`
}

const learnedVersion = 2

// OpenLearned loads path; a missing file is an empty memory.
func OpenLearned(path string) (*Learned, error) {
	l := &Learned{path: path, m: map[string]learnedPeak{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return nil, err
	}
	var f learnedFile
	if err := json.Unmarshal(b, &f); err == nil && f.Version == learnedVersion {
		for k, p := range f.Peaks {
			uid, _, ok := strings.Cut(k, ":")
			if _, err := strconv.ParseUint(uid, 10, 32); err != nil || !ok {
				return nil, fmt.Errorf("learned declarations %s: bad key %q", path, k)
			}
			l.m[k] = p
			l.seq = max(l.seq, p.Seq)
		}
		return l, nil
	}
	var old map[string]uint64
	if err := json.Unmarshal(b, &old); err != nil {
		return nil, fmt.Errorf("learned declarations %s: %w", path, err)
	}
	for k, peak := range old {
		uid, cmd, _ := strings.Cut(k, "\x00")
		n, err := strconv.ParseUint(uid, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("learned declarations %s: bad key %q", path, k)
		}
		l.seq++
		l.putLocked(uint32(n), strings.Split(cmd, "\x00"), peak)
	}
	return l, nil
}

// learnedKey names cmd run by uid: "uid:digest". No argument holds a NUL,
// so joining them with one is unambiguous.
func learnedKey(uid uint32, cmd []string) string {
	sum := sha256.Sum256([]byte(strings.Join(cmd, "\x00")))
	return strconv.FormatUint(uint64(uid), 10) + ":" + hex.EncodeToString(sum[:])
}

// Get returns the remembered peak of cmd run by uid.
func (l *Learned) Get(uid uint32, cmd []string) (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.m[learnedKey(uid, cmd)]
	return p.Peak, ok
}

// Put remembers peak for cmd run by uid, forgetting the command uid's
// learned longest ago when uid has LearnedPerUser already.
func (l *Learned) Put(uid uint32, cmd []string, peak uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	l.putLocked(uid, cmd, peak)
	b, err := json.Marshal(learnedFile{Version: learnedVersion, Peaks: l.m})
	if err != nil {
		return err
	}
	return store.WriteFile(l.path, b, 0o600)
}

func (l *Learned) putLocked(uid uint32, cmd []string, peak uint64) {
	key := learnedKey(uid, cmd)
	if _, ok := l.m[key]; !ok {
		prefix := strconv.FormatUint(uint64(uid), 10) + ":"
		var n int
		var oldest string
		for k, p := range l.m {
			if strings.HasPrefix(k, prefix) {
				n++
				if oldest == "" || p.Seq < l.m[oldest].Seq {
					oldest = k
				}
			}
		}
		if n >= LearnedPerUser {
			delete(l.m, oldest)
		}
	}
	l.m[key] = learnedPeak{Peak: peak, Seq: l.seq}
}
