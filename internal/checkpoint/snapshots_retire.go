package checkpoint

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// TrashDir, in the store's directory, holds retired snapshots until they
// are removed: on the same file system, so that retiring is one rename.
const TrashDir = ".trash"

// retireStep is about how much of a retired image one step of its removal
// frees. On a file system mounted with discard a truncate or unlink trims
// what it frees before it returns, and the disk serves other reads slowly
// meanwhile (32 MiB: 7-10 ms on the development VM).
const retireStep = 32 << 20

// retireYield bounds how long one step waits for foreground disk work to
// end, so that a store that is always busy still frees its trash.
var retireYield = 2 * time.Second

// yieldHook, when set (by tests), is called as a step starts to wait.
var yieldHook func()

// Retire forgets a snapshot that is no longer needed (one a newer full
// image replaced, or a fork's image) and removes its directory in the
// background, so that the caller does not wait for the file system to
// free a large image. The directory is first renamed into the store's
// trash, so that what a daemon that dies meanwhile leaves is never taken
// for a snapshot; OpenSnapshots empties the trash. Until it is removed its
// bytes count in Bytes, so the disk budget holds throughout. The removal
// frees about retireStep at a time and yields to Foreground work before
// each step. Wait waits for the removals.
func (s *Snapshots) Retire(id string) error {
	s.mu.Lock()
	m := s.m[id]
	delete(s.m, id)
	s.mu.Unlock()
	trash := filepath.Join(s.dir, TrashDir)
	if err := os.Mkdir(trash, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return s.Discard(id)
	}
	dst := filepath.Join(trash, id)
	if err := os.Rename(s.Path(id), dst); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // gone already
		}
		return s.Discard(id)
	}
	s.queueRemoval(dst, m.Bytes)
	return nil
}

// emptyTrash removes, in the background, what the trash holds.
func (s *Snapshots) emptyTrash() {
	trash := filepath.Join(s.dir, TrashDir)
	ents, err := os.ReadDir(trash)
	if err != nil {
		return
	}
	for _, e := range ents {
		s.queueRemoval(filepath.Join(trash, e.Name()), 0)
	}
}

// retired is a directory in the trash to remove, with the bytes it counts
// in Bytes until then.
type retired struct {
	dir   string
	bytes uint64
}

// queueRemoval hands dir to the store's one remover, starting it if idle:
// one removal at a time, as two would only split the disk between them.
func (s *Snapshots) queueRemoval(dir string, bytes uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retiring += bytes
	s.trash = append(s.trash, retired{dir, bytes})
	if s.drained == nil {
		s.drained = make(chan struct{})
		go s.removeTrash(s.drained)
	}
}

// removeTrash removes the queued directories, in order, until none is
// left or the store is stopped (Stop); what it leaves, the next
// OpenSnapshots removes.
func (s *Snapshots) removeTrash(drained chan struct{}) {
	for {
		s.mu.Lock()
		if len(s.trash) == 0 {
			s.drained = nil
			close(drained)
			s.mu.Unlock()
			return
		}
		r := s.trash[0]
		s.trash = s.trash[1:]
		s.mu.Unlock()
		if !s.stopped() {
			s.removeRetired(r.dir)
		}
		s.mu.Lock()
		s.retiring -= r.bytes
		s.mu.Unlock()
	}
}

// removeRetired shrinks the images of dir (a snapshot's directory in the
// trash) retireStep at a time, yielding before each step, then removes
// what is left. Only the directory's own regular files are shrunk,
// opened without following links (its parent link is a symlink).
func (s *Snapshots) removeRetired(dir string) {
	if d, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0); err == nil {
		ents, _ := d.ReadDir(-1)
		for _, e := range ents {
			if e.Type().IsRegular() && !s.stopped() {
				s.shrink(int(d.Fd()), e.Name())
			}
		}
		d.Close()
	}
	if !s.stopped() {
		_ = os.RemoveAll(dir) // what fails here, the next OpenSnapshots removes
	}
}

// shrink truncates the file name in the directory dirfd to nothing from
// its end, each step after yieldToForeground. A step frees about
// retireStep of what the file holds on disk: the steps are counted from
// its allocated blocks, so that a sparse file, however long, takes few.
func (s *Snapshots) shrink(dirfd int, name string) {
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return
	}
	steps := max(1, (st.Blocks*512+retireStep-1)/retireStep)
	step := max(retireStep, (st.Size+steps-1)/steps)
	for size := st.Size; size > 0; {
		if s.yieldToForeground(); s.stopped() {
			return
		}
		size = max(0, size-step)
		if unix.Ftruncate(fd, size) != nil {
			return
		}
	}
}

// Foreground marks disk work that the removal of retired snapshots yields
// to (a dump, a restore from disk) until done is called.
func (s *Snapshots) Foreground() (done func()) {
	s.mu.Lock()
	s.busy++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.busy--; s.busy == 0 {
			s.wakeRemover()
		}
	}
}

// yieldToForeground waits, at most retireYield, until no Foreground work
// is in flight or someone waits in Reclaim.
func (s *Snapshots) yieldToForeground() {
	deadline := time.NewTimer(retireYield)
	defer deadline.Stop()
	for told := false; ; told = true {
		s.mu.Lock()
		wake, wait := s.wake, s.busy > 0 && s.hurry == 0
		s.mu.Unlock()
		if !wait {
			return
		}
		if yieldHook != nil && !told {
			yieldHook()
		}
		select {
		case <-wake:
		case <-deadline.C:
			return
		case <-s.stop:
			return
		}
	}
}

// wakeRemover, with s.mu held, has a waiting removal step look again.
func (s *Snapshots) wakeRemover() {
	close(s.wake)
	s.wake = make(chan struct{})
}

// Reclaim waits until the retired snapshots are removed, their removal no
// longer yielding, or until ctx ends: for a caller that needs their space.
func (s *Snapshots) Reclaim(ctx context.Context) error {
	s.mu.Lock()
	s.hurry++
	s.wakeRemover()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.hurry--
		s.mu.Unlock()
	}()
	return s.drain(ctx)
}

// drain waits until the remover has nothing left, or until ctx ends.
func (s *Snapshots) drain(ctx context.Context) error {
	for {
		s.mu.Lock()
		drained := s.drained
		s.mu.Unlock()
		if drained == nil {
			return nil
		}
		select {
		case <-drained:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Wait waits for the removals Retire and OpenSnapshots started, pauses
// included.
func (s *Snapshots) Wait() { _ = s.drain(context.Background()) }

// Stop ends the removals after their current step; the next OpenSnapshots
// removes what they leave. For a daemon that stops.
func (s *Snapshots) Stop() {
	s.stopOnce.Do(func() { close(s.stop) })
	s.Wait()
}

func (s *Snapshots) stopped() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}
