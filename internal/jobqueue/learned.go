package jobqueue

import (
	"context"
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
	"time"

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
// atomically by Flush; Keep flushes what changed at most once a period, so
// that a stream of jobs costs the disk one write a period, not one a job.
type Learned struct {
	path  string
	mu    sync.Mutex
	users map[uint32]map[string]learnedPeak // uid -> digest -> peak
	seq   uint64                            // the last Put's
	dirty bool                              // a change not yet written
	kick  chan struct{}                     // 1-buffered: a change since Keep last looked
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
	l := &Learned{path: path, users: map[uint32]map[string]learnedPeak{}, kick: make(chan struct{}, 1)}
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
			uid, digest, ok := strings.Cut(k, ":")
			n, err := strconv.ParseUint(uid, 10, 32)
			if err != nil || !ok {
				return nil, fmt.Errorf("learned declarations %s: bad key %q", path, k)
			}
			l.user(uint32(n))[digest] = p
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

// learnedDigest names cmd: no argument holds a NUL, so joining them with
// one is unambiguous. In the file, a command is keyed "uid:digest".
func learnedDigest(cmd []string) string {
	sum := sha256.Sum256([]byte(strings.Join(cmd, "\x00")))
	return hex.EncodeToString(sum[:])
}

// user returns uid's commands, made when missing.
func (l *Learned) user(uid uint32) map[string]learnedPeak {
	m, ok := l.users[uid]
	if !ok {
		m = map[string]learnedPeak{}
		l.users[uid] = m
	}
	return m
}

// Get returns the remembered peak of cmd run by uid.
func (l *Learned) Get(uid uint32, cmd []string) (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.users[uid][learnedDigest(cmd)]
	return p.Peak, ok
}

// Put remembers peak for cmd run by uid, forgetting the command uid
// learned longest ago when uid has LearnedPerUser already. It writes
// nothing: Flush (or Keep) does.
func (l *Learned) Put(uid uint32, cmd []string, peak uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	if !l.putLocked(uid, cmd, peak) {
		return
	}
	l.dirty = true
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// putLocked remembers peak and reports whether that changed what is
// written: a new command, or a new peak (not a command learned again).
func (l *Learned) putLocked(uid uint32, cmd []string, peak uint64) bool {
	m, digest := l.user(uid), learnedDigest(cmd)
	old, ok := m[digest]
	if !ok && len(m) >= LearnedPerUser {
		var oldest string
		for k, p := range m {
			if oldest == "" || p.Seq < m[oldest].Seq {
				oldest = k
			}
		}
		delete(m, oldest)
	}
	m[digest] = learnedPeak{Peak: peak, Seq: l.seq}
	return !ok || old.Peak != peak
}

// Flush writes what was learned, if anything changed since the last write.
func (l *Learned) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.dirty {
		return nil
	}
	err := store.WriteFile(l.path, l.encodeLocked(), 0o600)
	if err != nil {
		return fmt.Errorf("learned declarations %s: %w", l.path, err)
	}
	l.dirty = false
	return nil
}

// encodeLocked writes the memory in the file's form (learnedFile), by
// hand: a key is digits, a colon and hex, nothing to escape, and a
// memory of 25,600 commands is one buffer, not a map of it to marshal.
func (l *Learned) encodeLocked() []byte {
	n := 0
	for _, m := range l.users {
		n += len(m)
	}
	b := make([]byte, 0, 32+n*(len(`"4294967295:":{"peak":,"seq":},`)+64+40))
	b = append(b, `{"version":`...)
	b = strconv.AppendInt(b, learnedVersion, 10)
	b = append(b, `,"peaks":{`...)
	first := true
	for uid, m := range l.users {
		for digest, p := range m {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(b, '"')
			b = strconv.AppendUint(b, uint64(uid), 10)
			b = append(b, ':')
			b = append(b, digest...)
			b = append(b, `":{"peak":`...)
			b = strconv.AppendUint(b, p.Peak, 10)
			b = append(b, `,"seq":`...)
			b = strconv.AppendUint(b, p.Seq, 10)
			b = append(b, '}')
		}
	}
	return append(b, "}}"...)
}

// Keep flushes until ctx ends: a period after the first change since the
// last write, so at most once a period. A failed write is handed to failed
// and tried again after the next change. What changed in the last period
// before ctx ended is left to a last Flush.
func (l *Learned) Keep(ctx context.Context, period time.Duration, failed func(error)) {
	t := time.NewTimer(0)
	<-t.C
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.kick:
		}
		t.Reset(period)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if err := l.Flush(); err != nil {
			failed(err)
		}
	}
}
