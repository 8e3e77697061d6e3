package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Mount is where a unified (cgroup v2 only) host mounts the cgroup tree.
const Mount = "/sys/fs/cgroup"

// Under a delegated cgroup, the daemon lives in the DaemonGroup leaf and
// each managed tree in ProcsGroup/<id>: cgroup v2's no-internal-processes
// rule forbids a cgroup that distributes cpu to its children from holding
// processes itself.
const (
	DaemonGroup = "daemon"
	ProcsGroup  = "procs"
)

// Option adjusts Detect.
type Option func(*options)

type options struct {
	plain    bool   // accept a root that is not on a cgroup2 file system
	mount    string // Mount
	selfFile string // /proc/self/cgroup
}

// AllowPlainDir makes Detect accept an explicit root that is an ordinary
// directory laid out like a cgroup2 tree (cgroup.controllers listing cpu,
// cgroup.subtree_control, cgroup.procs): the interface files are created
// and written as the kernel's would be, and nothing is enforced. For
// tests; a daemon never sets it from its configuration.
func AllowPlainDir() Option { return func(o *options) { o.plain = true } }

// withMount and withSelfFile stand in for /sys/fs/cgroup and
// /proc/self/cgroup in tests of the delegated layout.
func withMount(dir string) Option     { return func(o *options) { o.mount = dir } }
func withSelfFile(path string) Option { return func(o *options) { o.selfFile = path } }

// Manager creates, weighs and removes the cgroups of managed trees. Its
// methods may be called concurrently for different ids.
type Manager struct {
	parent  string   // holds one cgroup per tree, named by its id
	enable  []string // cgroups whose subtree_control needs cpu, top down
	service string   // auto mode: the cgroup delegated to the daemon
	self    string   // auto mode: the leaf the daemon moves itself into; "" when it already runs there
	plain   bool     // an ordinary directory, not cgroupfs (tests)
	pids    bool     // EnablePids enabled pids in service
}

// Detect finds where the cgroups of managed trees go, without changing
// anything (Setup does). root "" means the daemon's own delegated cgroup:
// /sys/fs/cgroup must be a cgroup2 mount, the daemon's cgroup (the "0::"
// line of /proc/self/cgroup, or its parent when that is already the
// DaemonGroup leaf) must be delegated to it (systemd Delegate=yes marks it
// with the trusted.delegate attribute) and offer the cpu controller; trees
// then go into <that cgroup>/procs/<id>. Any other root is an absolute
// path used as the parent directly (<root>/<id>), which must be a cgroup2
// directory offering cpu and holding no processes. Where cpu.weight cannot
// be managed the error wraps ErrUnavailable and says why.
func Detect(root string, opts ...Option) (*Manager, error) {
	o := options{mount: Mount, selfFile: "/proc/self/cgroup"}
	for _, f := range opts {
		f(&o)
	}
	if root == "" {
		return detectDelegated(o)
	}
	if !filepath.IsAbs(root) {
		return nil, unavailable("cgroup root %q is not an absolute path", root)
	}
	root = filepath.Clean(root)
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return nil, unavailable("cgroup root %s is not an existing directory", root)
	}
	if !o.plain && !isCgroup2(root) {
		return nil, unavailable("cgroup root %s is not on a cgroup2 file system", root)
	}
	if err := offersCPU(root); err != nil {
		return nil, err
	}
	if err := unix.Access(root, unix.W_OK); err != nil {
		return nil, unavailable("cgroup root %s is not writable: %v", root, err)
	}
	return &Manager{parent: root, enable: []string{root}, plain: o.plain}, nil
}

// detectDelegated is Detect for the daemon's own cgroup.
func detectDelegated(o options) (*Manager, error) {
	if !o.plain && !isCgroup2(o.mount) {
		unified := filepath.Join(o.mount, "unified")
		if isCgroup2(unified) {
			return nil, unavailable("hybrid cgroup layout: %s is cgroup v1 and the cpu controller is bound to v1 (%s is a cgroup2 mount without it); cpu.weight needs a cgroup v2 host, only nice applies", o.mount, unified)
		}
		return nil, unavailable("%s is not a cgroup2 mount (cgroup v1 host); cpu.weight needs cgroup v2, only nice applies", o.mount)
	}
	rel, err := ownCgroup(o.selfFile)
	if err != nil {
		return nil, err
	}
	if rel == "/" {
		return nil, unavailable("the daemon runs in the root cgroup, which is not delegated to it: run it under systemd with Delegate=yes, or give --cgroup-root")
	}
	service, self := filepath.Join(o.mount, rel), ""
	if filepath.Base(service) == DaemonGroup {
		// Started in the leaf already (systemd DelegateSubgroup=daemon),
		// or by an earlier Setup of this process.
		service = filepath.Dir(service)
	} else {
		self = filepath.Join(service, DaemonGroup)
	}
	if !delegated(service) {
		return nil, unavailable("cgroup %s is not delegated to the daemon (no trusted.delegate attribute): run it under systemd with Delegate=yes, or give --cgroup-root", service)
	}
	if err := offersCPU(service); err != nil {
		return nil, err
	}
	procs := filepath.Join(service, ProcsGroup)
	return &Manager{parent: procs, enable: []string{service, procs}, service: service, self: self, plain: o.plain}, nil
}

// Parent is the directory holding the trees' cgroups.
func (m *Manager) Parent() string { return m.parent }

// Setup makes the layout usable and is idempotent. In a delegated cgroup
// the daemon first moves itself, and whatever else runs there, into the
// DaemonGroup leaf; then cpu is enabled in each cgroup.subtree_control
// from the top down.
func (m *Manager) Setup() error {
	if m.self != "" {
		if err := mkdir(m.self); err != nil {
			return err
		}
		if err := m.evacuate(); err != nil {
			return err
		}
	}
	if m.service != "" {
		if err := mkdir(m.parent); err != nil {
			return err
		}
	}
	for i, dir := range m.enable {
		err := m.enableCPU(dir)
		// A process forked into the delegated cgroup since the move
		// makes the kernel refuse: move it too and try again.
		for try := 0; errors.Is(err, unix.EBUSY) && i == 0 && m.self != "" && try < 3; try++ {
			if err = m.evacuate(); err == nil {
				err = m.enableCPU(dir)
			}
		}
		if errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("enable cpu in %s: %w (a cgroup that shares cpu among its children may hold no processes itself)",
				filepath.Join(dir, "cgroup.subtree_control"), err)
		}
		if err != nil {
			return fmt.Errorf("enable cpu in %s: %w", filepath.Join(dir, "cgroup.subtree_control"), err)
		}
	}
	return nil
}

// evacuate moves this process, then every other process of the delegated
// cgroup, into the daemon leaf.
func (m *Manager) evacuate() error {
	pids := []int{os.Getpid()}
	data, err := os.ReadFile(filepath.Join(m.service, "cgroup.procs"))
	if err != nil {
		return err
	}
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	for _, pid := range pids {
		if err := m.write(filepath.Join(m.self, "cgroup.procs"), strconv.Itoa(pid), true); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("move pid %d into %s: %w", pid, m.self, err)
		}
	}
	return nil
}

// Close hands back the cpu controller when the daemon moved itself into
// its leaf: systemd starts the next daemon in the delegated cgroup itself,
// which the kernel refuses while that cgroup distributes cpu. The trees
// keep their cgroups at the default weight until the next daemon's Setup
// enables cpu again and their weights are set once more. When systemd
// started the daemon in its leaf (DelegateSubgroup=daemon) or the root is
// explicit, Close changes nothing.
func (m *Manager) Close() error {
	if m.self == "" {
		return nil
	}
	var errs []error
	for _, dir := range slices.Backward(m.enable) {
		if err := m.write(filepath.Join(dir, "cgroup.subtree_control"), "-cpu", false); err != nil {
			errs = append(errs, fmt.Errorf("disable cpu in %s: %w", dir, err))
		}
	}
	if m.pids {
		if err := m.write(filepath.Join(m.service, "cgroup.subtree_control"), "-pids", false); err != nil {
			errs = append(errs, fmt.Errorf("disable pids in %s: %w", m.service, err))
		}
	}
	return errors.Join(errs...)
}

// EnablePids enables the pids controller for the cgroup that holds the
// trees' cgroups, so that it has a pids.max (internal/taskreserve): in a
// delegated cgroup, in the service cgroup's cgroup.subtree_control, once
// Setup has emptied it. Close hands it back with cpu. Under an explicit
// root it changes nothing: the root's parent is not the daemon's.
func (m *Manager) EnablePids() error {
	if m.service == "" {
		return nil
	}
	if err := m.enableController(m.service, "pids"); err != nil {
		return fmt.Errorf("enable pids in %s: %w", filepath.Join(m.service, "cgroup.subtree_control"), err)
	}
	m.pids = true
	return nil
}

// Place puts pid in the cgroup of tree id, created when missing, with the
// cpu.weight of nice. Writing a pid moves all its threads; children it
// forks later are born in the cgroup, children it already has are not
// (place each of them too).
func (m *Manager) Place(id string, pid, nice int) error {
	dir, err := m.dir(id)
	if err != nil {
		return err
	}
	if err := mkdir(dir); err != nil {
		return fmt.Errorf("cgroup %s: %w", id, err)
	}
	if err := m.write(filepath.Join(dir, "cpu.weight"), strconv.FormatUint(Weight(nice), 10), false); err != nil {
		return fmt.Errorf("cgroup %s: cpu.weight: %w", id, err)
	}
	if err := m.write(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid), true); err != nil {
		return fmt.Errorf("cgroup %s: move pid %d: %w", id, pid, err)
	}
	return nil
}

// SetWeight sets the cpu.weight of tree id's existing cgroup from nice.
func (m *Manager) SetWeight(id string, nice int) error {
	dir, err := m.dir(id)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cgroup %s: %w", id, ErrNotFound)
	}
	if err := m.write(filepath.Join(dir, "cpu.weight"), strconv.FormatUint(Weight(nice), 10), false); err != nil {
		return fmt.Errorf("cgroup %s: cpu.weight: %w", id, err)
	}
	return nil
}

// Remove deletes tree id's cgroup once its processes are gone; a missing
// cgroup is not an error. The kernel empties a cgroup as its processes
// exit, so Remove waits a little for the last ones before it gives up
// with ErrBusy.
func (m *Manager) Remove(id string) error {
	dir, err := m.dir(id)
	if err != nil {
		return err
	}
	if err := m.rmdir(dir, 20); err != nil {
		return fmt.Errorf("cgroup %s: %w", id, err)
	}
	return nil
}

// Prune removes the empty cgroups of trees that keep does not claim, as
// left by trees that ended while no daemon watched them, and returns
// their ids. Cgroups that still hold processes are left alone.
func (m *Manager) Prune(keep func(id string) bool) ([]string, error) {
	ents, err := os.ReadDir(m.parent)
	if err != nil {
		return nil, err
	}
	removed := []string{}
	var errs []error
	for _, e := range ents {
		id := e.Name()
		if !e.IsDir() || validID(id) != nil || keep(id) {
			continue
		}
		switch err := m.rmdir(filepath.Join(m.parent, id), 0); {
		case err == nil:
			removed = append(removed, id)
		case !errors.Is(err, ErrBusy):
			errs = append(errs, fmt.Errorf("cgroup %s: %w", id, err))
		}
	}
	return removed, errors.Join(errs...)
}

func (m *Manager) dir(id string) (string, error) {
	if err := validID(id); err != nil {
		return "", err
	}
	return filepath.Join(m.parent, id), nil
}

// validID accepts names that cannot be a path or collide with an
// interface file (those all contain a dot).
func validID(id string) error {
	if id == "" || len(id) > 128 || strings.ContainsAny(id, "/.\x00\n") {
		return fmt.Errorf("%q: %w", id, ErrInvalidID)
	}
	return nil
}

// write writes one value to an interface file. In a plain directory the
// file is created, and cgroup.procs accumulates as the kernel's lists.
func (m *Manager) write(path, value string, appendTo bool) error {
	flags := os.O_WRONLY
	if m.plain {
		flags |= os.O_CREATE
		if appendTo {
			flags |= os.O_APPEND
		} else {
			flags |= os.O_TRUNC
		}
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// rmdir removes one cgroup, retrying while it still holds processes. A
// plain directory first loses the files written into it.
func (m *Manager) rmdir(dir string, tries int) error {
	if m.plain {
		ents, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		for _, e := range ents {
			if e.Type().IsRegular() {
				os.Remove(filepath.Join(dir, e.Name()))
			}
		}
	}
	return rmdirRetry(dir, tries)
}

// rmdirRetry removes one cgroup, retrying while it still holds processes.
func rmdirRetry(dir string, tries int) error {
	for i := 0; ; i++ {
		err := unix.Rmdir(dir)
		switch {
		case err == nil || errors.Is(err, unix.ENOENT):
			return nil
		case !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOTEMPTY):
			return fmt.Errorf("remove %s: %w", dir, err)
		case i >= tries:
			return fmt.Errorf("remove %s: %w", dir, ErrBusy)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func unavailable(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrUnavailable)
}

func isCgroup2(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// ownCgroup is the cgroup v2 path of this process, from the "0::" line.
func ownCgroup(selfFile string) (string, error) {
	f, err := os.Open(selfFile)
	if err != nil {
		return "", unavailable("read %s: %v", selfFile, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rel, ok := strings.CutPrefix(sc.Text(), "0::"); ok && strings.HasPrefix(rel, "/") {
			return filepath.Clean(strings.TrimSuffix(rel, " (deleted)")), nil
		}
	}
	return "", unavailable("%s has no cgroup v2 (\"0::\") line", selfFile)
}

// delegated reports whether systemd delegated dir (Delegate=yes sets the
// trusted.delegate attribute, or user.delegate in a user manager).
func delegated(dir string) bool {
	for _, attr := range []string{"trusted.delegate", "user.delegate"} {
		buf := make([]byte, 16)
		if n, err := unix.Getxattr(dir, attr, buf); err == nil && string(buf[:n]) == "1" {
			return true
		}
	}
	return false
}

// offersCPU checks that dir's cgroup.controllers lists cpu.
func offersCPU(dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return unavailable("%s: %v", dir, err)
	}
	if !slices.Contains(strings.Fields(string(data)), "cpu") {
		return unavailable("the cpu controller is not available in %s (cgroup.controllers: %q): delegate it (systemd Delegate=yes or Delegate=cpu)", dir, string(bytes.TrimSpace(data)))
	}
	return nil
}

// enableCPU adds cpu to dir's cgroup.subtree_control unless it is there.
func (m *Manager) enableCPU(dir string) error { return m.enableController(dir, "cpu") }

// enableController adds controller to dir's cgroup.subtree_control unless
// it is there. A plain directory gets what the kernel would then show.
func (m *Manager) enableController(dir, controller string) error {
	path := filepath.Join(dir, "cgroup.subtree_control")
	data, err := os.ReadFile(path)
	if m.plain && errors.Is(err, fs.ErrNotExist) {
		data, err = nil, nil // the kernel creates it with the cgroup
	}
	if err != nil {
		return err
	}
	if slices.Contains(strings.Fields(string(data)), controller) {
		return nil
	}
	if m.plain {
		return m.write(path, strings.TrimSpace(string(data)+" "+controller), false)
	}
	return m.write(path, "+"+controller, false)
}

func mkdir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}
