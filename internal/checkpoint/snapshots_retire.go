package checkpoint

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// TrashDir, in the store's directory, holds retired snapshots until they
// are removed: on the same file system, so that retiring is one rename.
const TrashDir = ".trash"

// Retire forgets a snapshot that is no longer needed (one a newer full
// image replaced, or a fork's image) and removes its directory in the
// background, so that the caller does not wait for the file system to
// free a large image (an unlink on a file system mounted with discard
// trims as it frees). The directory is first renamed into the store's
// trash, so that what a daemon that dies meanwhile leaves is never taken
// for a snapshot; OpenSnapshots empties the trash. Until it is removed its
// bytes count in Bytes, so the disk budget holds throughout. Wait waits
// for the removals.
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
	s.mu.Lock()
	s.retiring += m.Bytes
	s.mu.Unlock()
	s.removals.Add(1)
	go func() {
		defer s.removals.Done()
		_ = os.RemoveAll(dst) // what fails here, the next OpenSnapshots removes
		s.mu.Lock()
		s.retiring -= m.Bytes
		s.mu.Unlock()
	}()
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
		s.removals.Add(1)
		go func() {
			defer s.removals.Done()
			_ = os.RemoveAll(filepath.Join(trash, e.Name()))
		}()
	}
}

// Wait waits for the removals Retire and OpenSnapshots started.
func (s *Snapshots) Wait() { s.removals.Wait() }
