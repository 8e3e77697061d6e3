package jobqueue_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpusched/gpusched/internal/jobqueue"
)

func TestLearned(t *testing.T) {
	path := filepath.Join(t.TempDir(), "learned.json")
	l, err := jobqueue.OpenLearned(path)
	if err != nil {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("OpenLearned created the file before any Put")
	}
	train := []string{"python", "train.py"}
	puts := []struct {
		uid  uint32
		cmd  []string
		peak uint64
	}{
		{1000, train, 100}, // overwritten below
		{1000, train, 5000},
		{1001, train, 7000},
		{1000, []string{"python", "train.py", "--big"}, 9000},
		{1000, []string{"python train.py"}, 1},
		{1000, []string{"python", "train.py", ""}, 2},
		{0, []string{"nvidia-smi"}, 3},
	}
	for _, p := range puts {
		l.Put(p.uid, p.cmd, p.peak)
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("Put wrote the file: only Flush writes")
	}
	if err := l.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("learned file: %v, %v; want mode 0600", fi, err)
	}
	l2, err := jobqueue.OpenLearned(path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	cases := []struct {
		name string
		uid  uint32
		cmd  []string
		want uint64
		ok   bool
	}{
		{"latest put wins", 1000, train, 5000, true},
		{"other user", 1001, train, 7000, true},
		{"unknown user", 1002, train, 0, false},
		{"root", 0, []string{"nvidia-smi"}, 3, true},
		{"root did not run train", 0, train, 0, false},
		{"more args", 1000, []string{"python", "train.py", "--big"}, 9000, true},
		{"fewer args", 1000, []string{"python"}, 0, false},
		{"one arg with a space", 1000, []string{"python train.py"}, 1, true},
		{"trailing empty arg", 1000, []string{"python", "train.py", ""}, 2, true},
		{"other order", 1000, []string{"train.py", "python"}, 0, false},
		{"other case", 1000, []string{"Python", "train.py"}, 0, false},
	}
	for _, tc := range cases {
		for name, l := range map[string]*jobqueue.Learned{"live": l, "reopened": l2} {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				got, ok := l.Get(tc.uid, tc.cmd)
				if got != tc.want || ok != tc.ok {
					t.Errorf("Get(%d, %q) = %d, %v; want %d, %v", tc.uid, tc.cmd, got, ok, tc.want, tc.ok)
				}
			})
		}
	}
}

func TestOpenLearnedErrors(t *testing.T) {
	cases := []struct {
		name    string
		content string
	}{
		{"truncated", `{"1000\u0000python":50`},
		{"not json", "garbage"},
		{"wrong type", `{"1000\u0000python":"lots"}`},
		{"negative", `{"1000\u0000python":-1}`},
		{"array", `[1,2]`},
		{"empty", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "learned.json")
			writeFile(t, path, tc.content)
			if l, err := jobqueue.OpenLearned(path); err == nil {
				t.Errorf("OpenLearned of %q = %v, nil; want an error", tc.content, l)
			}
		})
	}
	t.Run("null is an empty memory", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "learned.json")
		writeFile(t, path, "null")
		l, err := jobqueue.OpenLearned(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := l.Get(1000, []string{"x"}); ok {
			t.Error("null remembers something")
		}
		l.Put(1000, []string{"x"}, 1)
		if err := l.Flush(); err != nil {
			t.Fatal(err)
		}
		if l2, err := jobqueue.OpenLearned(path); err != nil {
			t.Fatal(err)
		} else if v, ok := l2.Get(1000, []string{"x"}); !ok || v != 1 {
			t.Errorf("after Put over null: %d, %v", v, ok)
		}
	})
	t.Run("a directory", func(t *testing.T) {
		if _, err := jobqueue.OpenLearned(t.TempDir()); err == nil {
			t.Error("OpenLearned of a directory gave no error")
		}
	})
	t.Run("put into a missing dir", func(t *testing.T) {
		l, err := jobqueue.OpenLearned(filepath.Join(t.TempDir(), "gone", "learned.json"))
		if err != nil {
			t.Fatal(err)
		}
		l.Put(1000, []string{"x"}, 1)
		if err := l.Flush(); err == nil {
			t.Error("Flush with nowhere to write gave no error")
		}
	})
}

func TestLearnedRemembersTheLastCommandsOfEachUser(t *testing.T) {
	path := filepath.Join(t.TempDir(), "learned.json")
	l, err := jobqueue.OpenLearned(path)
	if err != nil {
		t.Fatal(err)
	}
	// Each command 100 KiB: the file holds a digest of each, not the command.
	long := func(i int) []string { return []string{"python", strings.Repeat("x", 100<<10), strconv.Itoa(i)} }
	l.Put(2000, long(0), 7)
	for i := range jobqueue.LearnedPerUser + 10 {
		l.Put(1000, long(i), uint64(i+1))
	}
	l.Put(1000, long(10), 11) // learned again: the newest
	l.Put(1000, long(jobqueue.LearnedPerUser+10), 99)
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	t.Logf("%d commands of 100 KiB learned, %d remembered: a file of %d bytes", jobqueue.LearnedPerUser+12, jobqueue.LearnedPerUser+1, fi.Size())
	if err != nil || fi.Size() > 200*(jobqueue.LearnedPerUser+1) {
		t.Fatalf("the learned file is %d bytes (%v) for %d commands", fi.Size(), err, jobqueue.LearnedPerUser+1)
	}
	again, err := jobqueue.OpenLearned(path)
	if err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]*jobqueue.Learned{"live": l, "reopened": again} {
		for i := range jobqueue.LearnedPerUser + 11 {
			_, ok := l.Get(1000, long(i))
			if want := i == 10 || i > 11; ok != want {
				t.Errorf("%s: command %d remembered %v, want %v (0 to 9 and 11, learned longest ago, forgotten)", name, i, ok, want)
			}
		}
		if v, ok := l.Get(2000, long(0)); !ok || v != 7 {
			t.Errorf("%s: another user's command forgotten (%d, %v)", name, v, ok)
		}
	}
}

func TestLearnedReadsAnEarlierDaemonsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "learned.json")
	writeFile(t, path, `{"1000\u0000python\u0000train.py":5000,"0\u0000nvidia-smi":3}`)
	l, err := jobqueue.OpenLearned(path)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := l.Get(1000, []string{"python", "train.py"}); !ok || v != 5000 {
		t.Errorf("user's command: %d, %v", v, ok)
	}
	if v, ok := l.Get(0, []string{"nvidia-smi"}); !ok || v != 3 {
		t.Errorf("root's command: %d, %v", v, ok)
	}
}

// TestLearnedFlushWritesOnlyChanges: a command learned again with the
// same peak is no change to write; a new peak is.
func TestLearnedFlushWritesOnlyChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "learned.json")
	l, err := jobqueue.OpenLearned(path)
	if err != nil {
		t.Fatal(err)
	}
	train := []string{"python", "train.py"}
	l.Put(1000, train, 5000)
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	removeFile(t, path) // a write brings it back
	l.Put(1000, train, 5000)
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if exists(path) {
		t.Error("the same peak learned again rewrote the file")
	}
	l.Put(1000, train, 6000)
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if !exists(path) {
		t.Error("a new peak was not written")
	}
}

// TestLearnedKeepWritesOncePerPeriod: Keep writes a period after the
// first change, everything learned meanwhile at once, and not again until
// something changes; on synctest's clock.
func TestLearnedKeepWritesOncePerPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "learned.json")
		l, err := jobqueue.OpenLearned(path)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			l.Keep(ctx, time.Second, func(err error) { t.Errorf("Keep: %v", err) })
		}()
		cmd := func(i int) []string { return []string{"job", strconv.Itoa(i)} }
		for i := range 100 {
			l.Put(1000, cmd(i), uint64(i+1))
		}
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		if _, err := os.Stat(path); err == nil {
			t.Fatal("written before the period was out")
		}
		for i := 100; i < 200; i++ {
			l.Put(1000, cmd(i), uint64(i+1))
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		again, err := jobqueue.OpenLearned(path)
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := again.Get(1000, cmd(199)); !ok || v != 200 {
			t.Fatalf("the one write lacks the last put: %d, %v", v, ok)
		}
		removeFile(t, path) // a write brings it back
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if exists(path) {
			t.Error("written again with nothing changed")
		}
		l.Put(1000, cmd(0), 7)
		time.Sleep(time.Second)
		synctest.Wait()
		if !exists(path) {
			t.Error("a change was not written a period later")
		}
		cancel()
		<-done
	})
}

func removeFile(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
