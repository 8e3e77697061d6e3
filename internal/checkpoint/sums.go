package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// SumsFile records the SHA-256 of the images a restore reads as a tree's
// state (sumsCover), written as the images are sealed.
const SumsFile = "gpusched-sums.json"

// ErrImagesChanged is a restore's error for images not as they were
// sealed.
var ErrImagesChanged = errors.New("the snapshot's images changed since they were written")

// sumsCover reports whether an image file's sum is kept: CRIU's images
// (credentials, files, mappings, registers) and the daemon's own records
// beside them, but not the memory pages (the tree's own memory, and the
// bulk), nor the store's metadata and the logs, which change.
func sumsCover(name string) bool {
	switch {
	case strings.HasPrefix(name, "pages-"), name == metaFile, name == SumsFile:
		return false
	}
	return strings.HasSuffix(name, ".img") || strings.HasSuffix(name, ".json")
}

// writeSums records the sums of dir's images (sumsCover). A restore then
// refuses images changed since (a process that had a descriptor to one
// could have rewritten its credentials).
func writeSums(dir string) error {
	sums, err := sumImages(dir)
	if err != nil {
		return err
	}
	b, err := json.Marshal(sums)
	if err != nil {
		return err
	}
	if was, err := os.ReadFile(filepath.Join(dir, SumsFile)); err == nil && bytes.Equal(was, b) {
		return nil // as it was: a snapshot a restore read is left untouched
	}
	tmp := filepath.Join(dir, SumsFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("images %s: %w", dir, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, SumsFile)); err != nil {
		return fmt.Errorf("images %s: %w", dir, err)
	}
	return nil
}

// checkSums fails with ErrImagesChanged where an image of dir is not as
// writeSums recorded it, or one is added or gone; images sealed before
// sums were kept have none, and pass.
func checkSums(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, SumsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("images %s: %w", dir, err)
	}
	var want map[string]string
	if err := json.Unmarshal(b, &want); err != nil {
		return fmt.Errorf("images %s: %w", dir, err)
	}
	got, err := sumImages(dir)
	if err != nil {
		return err
	}
	names := map[string]bool{}
	for n := range want {
		names[n] = true
	}
	for n := range got {
		names[n] = true
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if want[name] != got[name] {
			return fmt.Errorf("%w: %s", ErrImagesChanged, name)
		}
	}
	return nil
}

// sumImages hashes dir's images that sumsCover covers.
func sumImages(dir string) (map[string]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("images %s: %w", dir, err)
	}
	sums := map[string]string{}
	for _, e := range ents {
		if !e.Type().IsRegular() || !sumsCover(e.Name()) {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, e.Name()), os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return nil, fmt.Errorf("images %s: %w", dir, err)
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("images %s: %w", dir, err)
		}
		sums[e.Name()] = hex.EncodeToString(h.Sum(nil))
	}
	return sums, nil
}
