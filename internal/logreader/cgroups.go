package logreader

import (
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gpusched/gpusched/internal/procfs"
)

// Cgroups is where a process is in the hierarchies that weigh and account
// CPU: a directory in the unified (cgroup2) hierarchy, and one in each
// cgroup v1 hierarchy with the cpu or cpuacct controller. The zero value
// is nowhere.
type Cgroups struct {
	Unified string   // "" where no cgroup2 hierarchy is mounted
	V1      []string // sorted
}

// Apart reports whether c is elsewhere than o in some hierarchy where c is
// somewhere.
func (c Cgroups) Apart(o Cgroups) bool { return len(c.Except(o)) > 0 }

// Except lists c's directories in the hierarchies where o is elsewhere:
// where a process in o's cgroups is to be moved to be in c's.
func (c Cgroups) Except(o Cgroups) []string {
	var dirs []string
	if c.Unified != "" && c.Unified != o.Unified {
		dirs = append(dirs, c.Unified)
	}
	for _, d := range c.V1 {
		if !slices.Contains(o.V1, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// mounts is where the hierarchies are mounted: the cgroup2 one, and the v1
// ones of the cpu and cpuacct controllers (the same one where they are
// mounted together).
type mounts struct {
	unified     string
	cpu, cpuacc string
}

var hostMounts = sync.OnceValues(func() (mounts, error) { return readMounts("/proc/self/mountinfo") })

// maxMountinfo bounds what is read of mountinfo.
const maxMountinfo = 4 << 20

// readMounts finds the hierarchies' mounts in a mountinfo file (proc(5)):
// the first mount of each whose root is the hierarchy's.
func readMounts(file string) (mounts, error) {
	b, err := procfs.ReadFile(file, maxMountinfo)
	if err != nil {
		return mounts{}, err
	}
	var m mounts
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 || f[3] != "/" {
			continue
		}
		at := unescapeMount(f[4])
		switch g[0] {
		case "cgroup2":
			if m.unified == "" {
				m.unified = at
			}
		case "cgroup":
			for _, opt := range strings.Split(g[2], ",") {
				switch {
				case opt == "cpu" && m.cpu == "":
					m.cpu = at
				case opt == "cpuacct" && m.cpuacc == "":
					m.cpuacc = at
				}
			}
		}
	}
	return m, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// maxCgroupFile bounds what is read of /proc/PID/cgroup.
const maxCgroupFile = 64 << 10

// Of is where process pid is (/proc/PID/cgroup). A caller checks that pid
// still names the process it means once it has read this (a pidfd).
func Of(pid int) (Cgroups, error) {
	m, err := hostMounts()
	if err != nil {
		return Cgroups{}, err
	}
	b, err := procfs.ReadFile("/proc/"+strconv.Itoa(pid)+"/cgroup", maxCgroupFile)
	if err != nil {
		return Cgroups{}, err
	}
	return parseCgroups(string(b), m)
}

// parseCgroups reads a /proc/PID/cgroup file (cgroups(7)) against m.
func parseCgroups(file string, m mounts) (Cgroups, error) {
	var c Cgroups
	for _, line := range strings.Split(file, "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if !strings.HasPrefix(f[2], "/") || path.Clean(f[2]) != f[2] {
			return Cgroups{}, fmt.Errorf("cgroup path %q: not a clean absolute path", f[2])
		}
		if f[0] == "0" && f[1] == "" {
			if m.unified != "" {
				c.Unified = filepath.Join(m.unified, f[2])
			}
			continue
		}
		ctrls := strings.Split(f[1], ",")
		var at string
		switch {
		case slices.Contains(ctrls, "cpu"):
			at = m.cpu
		case slices.Contains(ctrls, "cpuacct"):
			at = m.cpuacc
		}
		if at != "" {
			c.V1 = append(c.V1, filepath.Join(at, f[2]))
		}
	}
	slices.Sort(c.V1)
	c.V1 = slices.Compact(c.V1)
	return c, nil
}
