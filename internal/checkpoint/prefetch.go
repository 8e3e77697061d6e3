package checkpoint

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// CRIU's restore reads an image's pages one preadv(2) at a time, from its
// restorer, in the order of the process's mappings (criu/pie/restorer.c,
// the vma_ios loop): a single stream of synchronous reads the size of a
// mapping run, which the kernel's readahead window turns into a few
// requests in flight at most. prefetchPages reads the pages images into
// the page cache ahead of it, from the start of the restore, with as many
// requests in flight as the disk's queue takes: CRIU's reads then find
// the pages there or already on the way.
const (
	prefetchWindow = 8 << 20 // bytes per readahead call: a POSIX_FADV_WILLNEED reads at most max(read_ahead_kb, the disk's largest request) per call (mm/readahead.c, force_page_cache_ra)
	prefetchChain  = 16      // parent links followed, past any --max-chain
)

// prefetchPages starts reading the pages images of the images directory
// dir, and of the parents it links to, into the page cache; stop ends the
// reading and returns once nothing reads any more. Errors only mean less
// is prefetched: CRIU reads what is missing itself.
func prefetchPages(dir string) (stop func()) {
	var quit atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for range prefetchChain {
			ents, err := os.ReadDir(dir)
			if err != nil {
				return
			}
			for _, e := range ents {
				if e.Type().IsRegular() && strings.HasPrefix(e.Name(), "pages-") && strings.HasSuffix(e.Name(), ".img") {
					if !prefetchFile(filepath.Join(dir, e.Name()), &quit) {
						return
					}
				}
			}
			// The parent link is a relative one the page server wrote
			// (linkParent), inside the root-only snapshot directory.
			target, err := os.Readlink(filepath.Join(dir, "parent"))
			if err != nil {
				return
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(dir, target)
			}
			dir = target
		}
	})
	return func() {
		quit.Store(true)
		wg.Wait()
	}
}

// prefetchFile asks for path's pages window by window; false once told to
// stop.
func prefetchFile(path string, quit *atomic.Bool) bool {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return true
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return true
	}
	for off := int64(0); off < st.Size(); off += prefetchWindow {
		if quit.Load() {
			return false
		}
		if err := unix.Fadvise(int(f.Fd()), off, prefetchWindow, unix.FADV_WILLNEED); err != nil {
			return true
		}
	}
	return true
}
