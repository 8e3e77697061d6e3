package jobqueue_test

import (
	"path/filepath"
	"strconv"
	"testing"

	"github.com/gpusched/gpusched/internal/jobqueue"
)

// learnedFull is a memory of 100 users' LearnedPerUser commands each.
func learnedFull(b *testing.B) *jobqueue.Learned {
	l, err := jobqueue.OpenLearned(filepath.Join(b.TempDir(), "learned.json"))
	if err != nil {
		b.Fatal(err)
	}
	for uid := range uint32(100) {
		for i := range jobqueue.LearnedPerUser {
			l.Put(1000+uid, []string{"python", "train.py", strconv.Itoa(i)}, uint64(i+1))
		}
	}
	return l
}

// BenchmarkLearnedPut measures what a job's end costs to learn its peak, a
// new command evicting the user's oldest, in a memory of 100 users' 256
// commands each: in memory only.
func BenchmarkLearnedPut(b *testing.B) {
	l := learnedFull(b)
	i := 0
	for b.Loop() {
		i++
		l.Put(1000, []string{"python", "new.py", strconv.Itoa(i)}, 1)
	}
}

// BenchmarkLearnedFlush measures one write of that memory (2.4 MB,
// synced): once a second at most; before, at every job's end.
func BenchmarkLearnedFlush(b *testing.B) {
	l := learnedFull(b)
	i := 0
	for b.Loop() {
		i++
		l.Put(1000, []string{"python", "new.py", strconv.Itoa(i)}, 1)
		if err := l.Flush(); err != nil {
			b.Fatal(err)
		}
	}
}
