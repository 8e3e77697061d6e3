package procfs

import (
	"errors"
	"io"
	"os"
	"strings"
)

// fdBatch is how many of a process's fd entries OpenFiles holds at once:
// a process may hold as many fds as its RLIMIT_NOFILE lets it.
const fdBatch = 1024

// ThreadFiles lists, up to max of them, the files pid holds open in a
// proc mount's directory of a thread other than a process's main one:
// /proc/<p>/task/<t>/... with t != p, as /proc/thread-self and glibc's
// pthread_setname_np (/proc/self/task/<tid>/comm) open them. CRIU reopens
// a process's files before it creates the process's other threads, so it
// cannot restore such a file: "Can't open file proc/9/task/15/comm on
// restore: No such file or directory" (criu/files-reg.c, open_path), and
// the image never restores. A process that is gone gives nothing.
func ThreadFiles(pid, max int) ([]string, error) { return OpenFiles(pid, max, isThreadFile) }

// OpenFiles lists, up to max of them, the paths of the files pid holds open
// (its fd links, as this process reads them) that match says yes to. It
// reads only the links, never the files. A process that is gone gives
// nothing.
func OpenFiles(pid, max int, match func(path string) bool) ([]string, error) {
	dir := Path(pid, "/fd")
	f, err := os.Open(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	defer f.Close()
	var out []string
	for len(out) < max {
		names, err := f.Readdirnames(fdBatch)
		for _, n := range names {
			link, lerr := os.Readlink(dir + "/" + n)
			if lerr == nil && match(link) && len(out) < max {
				out = append(out, link)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// isThreadFile reports whether path lies in /proc/<p>/task/<t> with t != p.
func isThreadFile(path string) bool {
	rest, ok := strings.CutPrefix(path, "/proc/")
	if !ok {
		return false
	}
	p, rest, _ := strings.Cut(rest, "/")
	rest, ok = strings.CutPrefix(rest, "task/")
	if !ok {
		return false
	}
	t, _, _ := strings.Cut(rest, "/")
	return isNumber(p) && isNumber(t) && t != p
}

func isNumber(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
