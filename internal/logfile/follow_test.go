package logfile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// guard bounds every wait; it only ever fires on failure.
const guard = 10 * time.Second

// following is a Follow running in the background.
type following struct {
	lines  chan string   // unbuffered: Follow waits in emit until the test takes a line
	ended  chan struct{} // closed when Follow has returned err
	err    error
	done   chan struct{}
	cancel context.CancelFunc
}

func startFollow(t *testing.T, path string, offset int64) *following {
	t.Helper()
	return startFollowWith(t, testWatcher(t), path, offset)
}

// lineFunc is a Lines that gives each line to a function, and has nothing
// to flush.
type lineFunc func(string) error

func (f lineFunc) Line(line string) error { return f(line) }
func (lineFunc) Flush() error             { return nil }

// startFollowWith is startFollow through w.
func startFollowWith(t *testing.T, w *Watcher, path string, offset int64) *following {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	fw := &following{lines: make(chan string), ended: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(fw.ended)
		fw.err = Follow(ctx, w, path, offset, fw.done, lineFunc(func(line string) error {
			select {
			case fw.lines <- line:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}))
	}()
	t.Cleanup(func() {
		cancel()
		<-fw.ended
	})
	return fw
}

// testWatcher is a Watcher closed when t ends, after the follows t started
// (cleanups run last first).
func testWatcher(t *testing.T) *Watcher {
	t.Helper()
	w := NewWatcher()
	t.Cleanup(func() { w.Close() })
	return w
}

// expect takes the next lines and checks them.
func (fw *following) expect(t *testing.T, want ...string) {
	t.Helper()
	for _, w := range want {
		select {
		case got := <-fw.lines:
			if got != w {
				t.Fatalf("line %q, want %q", got, w)
			}
		case <-fw.ended:
			t.Fatalf("Follow returned %v while %q was expected", fw.err, w)
		case <-time.After(guard):
			t.Fatalf("no line within %v, want %q", guard, w)
		}
	}
}

// end waits for Follow to return, failing on any further line.
func (fw *following) end(t *testing.T) error {
	t.Helper()
	select {
	case <-fw.ended:
		return fw.err
	case line := <-fw.lines:
		t.Fatalf("unexpected line %q", line)
	case <-time.After(guard):
		t.Fatalf("Follow did not return within %v", guard)
	}
	return nil
}

// finish closes done and checks the remaining lines and a nil result.
func (fw *following) finish(t *testing.T, want ...string) {
	t.Helper()
	close(fw.done)
	fw.expect(t, want...)
	if err := fw.end(t); err != nil {
		t.Fatalf("Follow = %v, want nil", err)
	}
}

func appendTo(t *testing.T, w *os.File, s string) {
	t.Helper()
	if _, err := w.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func openLog(t *testing.T) (string, *os.File) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "log")
	w, err := OpenAppend(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return path, w
}

// TestFollowProcess: lines written by a separate process through an inherited
// append descriptor arrive in order, after the tail and without repeating it.
func TestFollowProcess(t *testing.T) {
	path, w := openLog(t)
	appendTo(t, w, "old 1\nold 2\nunfin")
	tail, offset, err := followStrings(context.Background(), path, 1, 0)
	if err != nil || !slices.Equal(tail, []string{"old 2"}) {
		t.Fatalf("TailForFollow = %q, %v", tail, err)
	}
	fw := startFollow(t, path, offset)
	cmd := exec.Command("sh", "-c", `echo ished; for i in 1 2 3; do echo line $i; done; printf tail`)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	fw.expect(t, "unfinished", "line 1", "line 2", "line 3")
	fw.finish(t, "tail")
}

// TestFollowHandOffUnderLoad: a tail followed by a follow while a process
// keeps writing gives every line exactly once, in order.
func TestFollowHandOffUnderLoad(t *testing.T) {
	path, w := openLog(t)
	const total = 3000
	cmd := exec.Command("sh", "-c", fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo "n $i"; i=$((i+1)); done`, total))
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	got, offset, err := followStrings(context.Background(), path, -1, 0)
	if err != nil {
		t.Fatal(err)
	}
	fw := startFollow(t, path, offset)
	for len(got) < total {
		select {
		case line := <-fw.lines:
			got = append(got, line)
		case <-fw.ended:
			t.Fatalf("Follow returned %v after %d lines", fw.err, len(got))
		case <-time.After(guard):
			t.Fatalf("stuck after %d lines", len(got))
		}
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	for i, line := range got {
		if want := fmt.Sprintf("n %d", i); line != want {
			t.Fatalf("line %d = %q, want %q", i, line, want)
		}
	}
	fw.finish(t)
}

func TestFollowPartialLine(t *testing.T) {
	path, w := openLog(t)
	fw := startFollow(t, path, 0)
	appendTo(t, w, "first\nhel") // one write: "hel" is pending once "first" is out
	fw.expect(t, "first")
	appendTo(t, w, "lo\n")
	fw.expect(t, "hello")
	fw.finish(t)
}

func TestFollowTruncation(t *testing.T) {
	path, w := openLog(t)
	fw := startFollow(t, path, 0)
	appendTo(t, w, "a\nb\n")
	fw.expect(t, "a", "b")
	if err := Rotate(path, 1); err != nil {
		t.Fatal(err)
	}
	appendTo(t, w, "c\n")
	fw.expect(t, "c")
	fw.finish(t)
}

// TestFollowTruncationWhileLagging: the file is truncated and refilled past
// the follower's offset while the follower is busy emitting; it still
// starts over at the new content instead of in the middle of it.
func TestFollowTruncationWhileLagging(t *testing.T) {
	path, w := openLog(t)
	appendTo(t, w, "old1\nold2\n")
	fw := startFollow(t, path, 0)
	fw.expect(t, "old1") // Follow has read both lines and now waits to emit old2
	if err := Rotate(path, 0); err != nil {
		t.Fatal(err)
	}
	appendTo(t, w, "new-line-1\nnew-line-2\n")
	fw.expect(t, "old2", "new-line-1", "new-line-2")
	fw.finish(t)
}

// TestFollowOffsetPastEnd: an offset beyond a file truncated since the tail
// starts over at 0.
func TestFollowOffsetPastEnd(t *testing.T) {
	path, w := openLog(t)
	appendTo(t, w, "x\n")
	fw := startFollow(t, path, 100)
	fw.expect(t, "x")
	fw.finish(t)
}

func TestFollowDone(t *testing.T) {
	path, w := openLog(t)
	appendTo(t, w, "x\npartial")
	fw := startFollow(t, path, 0)
	fw.finish(t, "x", "partial")
}

func TestFollowCancel(t *testing.T) {
	path, w := openLog(t)
	fw := startFollow(t, path, 0)
	appendTo(t, w, "x\n")
	fw.expect(t, "x")
	fw.cancel()
	if err := fw.end(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("Follow = %v, want context.Canceled", err)
	}
}

func TestFollowEmitError(t *testing.T) {
	path, w := openLog(t)
	appendTo(t, w, "x\ny\n")
	boom := errors.New("boom")
	var got []string
	err := Follow(context.Background(), testWatcher(t), path, 0, nil, lineFunc(func(line string) error {
		got = append(got, line)
		return boom
	}))
	if !errors.Is(err, boom) || !slices.Equal(got, []string{"x"}) {
		t.Fatalf("Follow = %v after %q, want boom after [x]", err, got)
	}
}

func TestFollowMissing(t *testing.T) {
	err := Follow(context.Background(), testWatcher(t), filepath.Join(t.TempDir(), "log"), 0, nil, lineFunc(func(string) error { return nil }))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Follow = %v, want fs.ErrNotExist", err)
	}
}

// TestFollowFlushesEachRead: the lines of each read are followed by a
// Flush before Follow waits for more, and the final line by one before it
// returns: a Lines that holds lines until its Flush never holds one while
// Follow waits.
func TestFollowFlushesEachRead(t *testing.T) {
	path, w := openLog(t)
	got := make(chan string)
	done := make(chan struct{})
	ended := make(chan error, 1)
	go func() { ended <- Follow(t.Context(), testWatcher(t), path, 0, done, &recordLines{out: got}) }()
	expect := func(want ...string) {
		t.Helper()
		for _, s := range want {
			select {
			case g := <-got:
				if g != s {
					t.Fatalf("got %q, want %q", g, s)
				}
			case <-time.After(guard):
				t.Fatalf("nothing after %s, want %q", guard, s)
			}
		}
	}
	appendTo(t, w, "a\nb\n")
	expect("a", "b", "<flush>")
	appendTo(t, w, "c\nunfinished")
	expect("c", "<flush>")
	close(done)
	expect("unfinished", "<flush>")
	if err := <-ended; err != nil {
		t.Fatal(err)
	}
}

// recordLines is a Lines that sends each line, and "<flush>" for each
// Flush after lines, on a channel.
type recordLines struct {
	out     chan<- string
	pending bool
}

func (r *recordLines) Line(line string) error {
	r.out <- line
	r.pending = true
	return nil
}

func (r *recordLines) Flush() error {
	if r.pending {
		r.out <- "<flush>"
		r.pending = false
	}
	return nil
}
