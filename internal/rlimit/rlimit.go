package rlimit

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/procfs"
)

// Infinity is a limit that does not limit (RLIM_INFINITY).
const Infinity = unix.RLIM_INFINITY

// Limit is one resource's soft (Cur) and hard (Max) limit.
type Limit struct {
	Cur uint64 `json:"cur"`
	Max uint64 `json:"max"`
}

// Set holds limits by resource name. A resource it does not name is left
// as the process that applies the set has it.
type Set map[string]Limit

// resource is one limit Linux has: its prlimit(1) name, its number and
// its row in /proc/<pid>/limits (fs/proc/base.c, lnames).
type resource struct {
	name string
	res  int
	row  string
}

var resources = []resource{
	{"cpu", unix.RLIMIT_CPU, "Max cpu time"},
	{"fsize", unix.RLIMIT_FSIZE, "Max file size"},
	{"data", unix.RLIMIT_DATA, "Max data size"},
	{"stack", unix.RLIMIT_STACK, "Max stack size"},
	{"core", unix.RLIMIT_CORE, "Max core file size"},
	{"rss", unix.RLIMIT_RSS, "Max resident set"},
	{"nproc", unix.RLIMIT_NPROC, "Max processes"},
	{"nofile", unix.RLIMIT_NOFILE, "Max open files"},
	{"memlock", unix.RLIMIT_MEMLOCK, "Max locked memory"},
	{"as", unix.RLIMIT_AS, "Max address space"},
	{"locks", unix.RLIMIT_LOCKS, "Max file locks"},
	{"sigpending", unix.RLIMIT_SIGPENDING, "Max pending signals"},
	{"msgqueue", unix.RLIMIT_MSGQUEUE, "Max msgqueue size"},
	{"nice", unix.RLIMIT_NICE, "Max nice priority"},
	{"rtprio", unix.RLIMIT_RTPRIO, "Max realtime priority"},
	{"rttime", unix.RLIMIT_RTTIME, "Max realtime timeout"},
}

// ErrUnknown is a resource name Linux has no limit for.
var ErrUnknown = errors.New("unknown resource")

// maxLimitsFile bounds the read of /proc/<pid>/limits (about 1.4 KiB).
const maxLimitsFile = 4 << 10

// Of reads every limit of process pid from /proc/<pid>/limits, which any
// process may read (prlimit(2) on another user's process needs
// CAP_SYS_RESOURCE, which a daemon may lack). The caller makes sure pid
// is still the process it means.
func Of(pid int) (Set, error) {
	b, err := procfs.ReadFile("/proc/"+strconv.Itoa(pid)+"/limits", maxLimitsFile)
	if err != nil {
		return nil, fmt.Errorf("limits of pid %d: %w", pid, err)
	}
	s, err := parse(string(b))
	if err != nil {
		return nil, fmt.Errorf("limits of pid %d: %w", pid, err)
	}
	return s, nil
}

// parse reads the rows of a /proc/<pid>/limits file: a name, the soft and
// hard limit ("unlimited" or a number) and maybe a unit. Every resource
// must be there.
func parse(text string) (Set, error) {
	s := Set{}
	for _, line := range strings.Split(text, "\n") {
		for _, r := range resources {
			rest, ok := strings.CutPrefix(line, r.row+" ")
			if !ok {
				continue
			}
			f := strings.Fields(rest)
			if len(f) < 2 {
				return nil, fmt.Errorf("malformed row %q", line)
			}
			cur, err1 := parseValue(f[0])
			max, err2 := parseValue(f[1])
			if err := errors.Join(err1, err2); err != nil {
				return nil, fmt.Errorf("row %q: %w", line, err)
			}
			s[r.name] = Limit{Cur: cur, Max: max}
		}
	}
	for _, r := range resources {
		if _, ok := s[r.name]; !ok {
			return nil, fmt.Errorf("no row %q", r.row)
		}
	}
	return s, s.Validate()
}

func parseValue(v string) (uint64, error) {
	if v == "unlimited" {
		return Infinity, nil
	}
	return strconv.ParseUint(v, 10, 64)
}

// Validate checks that s names only known resources and that no soft
// limit is above its hard limit.
func (s Set) Validate() error {
	for _, name := range s.names() {
		l := s[name]
		if lookup(name) == nil {
			return fmt.Errorf("rlimit %q: %w", name, ErrUnknown)
		}
		if l.Cur > l.Max {
			return fmt.Errorf("rlimit %s: soft limit %d above hard limit %d", name, l.Cur, l.Max)
		}
	}
	return nil
}

// Apply puts s in force on the calling process (limits are per process,
// and its children inherit them). A hard limit above the process's own
// is lowered to it, and the soft limit with it: raising a hard limit takes
// CAP_SYS_RESOURCE, which the process applying a caller's limits never
// holds. On error some limits may already be lowered; the process is
// meant to give up. Setting RLIMIT_NOFILE this way also stops the Go
// runtime from restoring, at an exec, the soft limit it found at start
// (syscall.prlimit forgets it).
func Apply(s Set) error {
	if err := s.Validate(); err != nil {
		return err
	}
	for _, name := range s.names() {
		res, want := lookup(name).res, s[name]
		var own unix.Rlimit
		if err := unix.Prlimit(0, res, nil, &own); err != nil {
			return fmt.Errorf("rlimit %s: %w", name, err)
		}
		l := unix.Rlimit{Cur: min(want.Cur, own.Max), Max: min(want.Max, own.Max)}
		if err := unix.Prlimit(0, res, &l, nil); err != nil {
			return fmt.Errorf("rlimit %s %d:%d: %w", name, l.Cur, l.Max, err)
		}
	}
	return nil
}

func lookup(name string) *resource {
	for i := range resources {
		if resources[i].name == name {
			return &resources[i]
		}
	}
	return nil
}

// names are s's resources in a fixed order.
func (s Set) names() []string {
	out := make([]string, 0, len(s))
	for name := range s {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}
