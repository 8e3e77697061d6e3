package treefiles

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// held is one file a restored process holds by path and the access it
// holds it with (unix.R_OK, W_OK, X_OK).
type held struct {
	key, path string
	link      string // its /proc link
	mode      uint32
}

// CheckAccess reports the first file a restored process holds by path,
// the given ones aside (by identity: the files the caller gave the tree,
// its log and the like), that its owner may not have as the process holds
// it: read or written by its descriptors (as their flags say), mapped
// shared and writable, searched as its working or root directory,
// executed. The check is the kernel's own: asOwner runs its func on a
// thread with the owner's file credentials (sandbox.AsCaller), which asks
// faccessat2 (AT_EACCESS) of each file through a descriptor this process
// opened to it (O_PATH): the file's mode, owner, ACLs and security modules
// decide, not the path to it (a file its owner may read in a directory
// they may not enter passes). The tree's own processes' files in its
// /proc (/proc/N/…, root's until CRIU sets the tree's credentials) pass.
// restored maps namespace pids to host pids.
func CheckAccess(restored map[int]int, given []string, asOwner func(func() error) error) error {
	skip := identities(given)
	for ns, pid := range restored {
		files, err := heldBy(pid, skip)
		if err != nil {
			return fmt.Errorf("restored process %d: %w", ns, err)
		}
		if err := checkHeld(files, asOwner); err != nil {
			return fmt.Errorf("restored process %d %w", ns, err)
		}
	}
	return nil
}

// ownProc matches a path in a tree's own /proc: its processes' files.
var ownProc = regexp.MustCompile(`^/proc/[0-9]+/`)

// checkBatch bounds the descriptors checkHeld holds open at once: a
// user's tree may hold a quarter of a million files, and the daemon's
// descriptors serve every user.
const checkBatch = 512

// checkHeld asks, as the owner, for each of files' access, a batch at a
// time (checkBatchOf).
func checkHeld(files []held, asOwner func(func() error) error) error {
	for len(files) > 0 {
		n := min(len(files), checkBatch)
		if err := checkBatchOf(files[:n], asOwner); err != nil {
			return err
		}
		files = files[n:]
	}
	return nil
}

// checkBatchOf opens each of files O_PATH and asks, as the owner, for its
// access.
func checkBatchOf(files []held, asOwner func(func() error) error) error {
	fds := make([]int, 0, len(files))
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	var check []held
	for _, f := range files {
		fd, err := unix.Open(f.link, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("holds %s at %s, which cannot be looked at: %w", f.path, f.key, err)
		}
		fds = append(fds, fd)
		check = append(check, f)
	}
	return asOwner(func() error {
		for i, f := range check {
			err := unix.Faccessat2(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fds[i]), f.mode, unix.AT_EACCESS)
			if err != nil {
				return fmt.Errorf("holds %s at %s, which its owner may not %s (%v): %w", f.path, f.key, accessWords(f.mode), err, ErrDenied)
			}
		}
		return nil
	})
}

// heldBy lists what process pid holds by path, with the access it holds
// it with, but files whose identity skip holds.
func heldBy(pid int, skip map[[2]uint64]bool) ([]held, error) {
	var out []held
	add := func(h held) error {
		if !strings.HasPrefix(h.path, "/") || ownProc.MatchString(h.path) || h.mode == 0 {
			return nil
		}
		if id, err := identify("", h.link); err != nil || skip[[2]uint64{id.Dev, id.Ino}] {
			return nil // gone meanwhile, or given
		}
		if len(out) == MaxEntries {
			return ErrTooMany
		}
		out = append(out, h)
		return nil
	}
	base := "/proc/" + strconv.Itoa(pid) + "/"
	err := eachLink(pid, func(key, link string) error {
		path, err := os.Readlink(link)
		if err != nil {
			return nil
		}
		mode := uint32(unix.X_OK) // cwd, root, exe
		if n, ok := strings.CutPrefix(key, "fd/"); ok {
			if mode, err = fdAccess(base + "fdinfo/" + n); err != nil {
				return nil // closed meanwhile
			}
		}
		return add(held{key: key, path: path, link: link, mode: mode})
	})
	if err != nil {
		return nil, err
	}
	err = eachMapping(pid, func(id Identity, path string) error {
		mode := uint32(unix.R_OK)
		if id.shared && id.writable {
			mode |= unix.W_OK
		}
		return add(held{key: id.Key, path: path, link: fmt.Sprintf("%smap_files/%x-%x", base, id.Start, id.End), mode: mode})
	})
	return out, err
}

// fdAccess is the access a descriptor holds its file with, from its
// fdinfo's flags (octal): 0 for an O_PATH one, which reads and writes
// nothing.
func fdAccess(fdinfo string) (uint32, error) {
	b, err := os.ReadFile(fdinfo)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(l, "flags:")
		if !ok {
			continue
		}
		flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
		if err != nil {
			return 0, err
		}
		switch {
		case flags&unix.O_PATH != 0:
			return 0, nil
		case flags&unix.O_ACCMODE == unix.O_WRONLY:
			return unix.W_OK, nil
		case flags&unix.O_ACCMODE == unix.O_RDWR:
			return unix.R_OK | unix.W_OK, nil
		}
		return unix.R_OK, nil
	}
	return 0, fmt.Errorf("%s has no flags", fdinfo)
}

func accessWords(mode uint32) string {
	var w []string
	for _, a := range []struct {
		bit  uint32
		word string
	}{{unix.R_OK, "read"}, {unix.W_OK, "write"}, {unix.X_OK, "search or execute"}} {
		if mode&a.bit != 0 {
			w = append(w, a.word)
		}
	}
	return strings.Join(w, " and ")
}
