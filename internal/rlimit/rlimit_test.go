package rlimit

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOfMatchesGetrlimit: every limit read from /proc/<pid>/limits is the
// one the kernel holds.
func TestOfMatchesGetrlimit(t *testing.T) {
	s, err := Of(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != len(resources) {
		t.Fatalf("read %d limits, want %d", len(s), len(resources))
	}
	for _, r := range resources {
		var l unix.Rlimit
		if err := unix.Prlimit(0, r.res, nil, &l); err != nil {
			t.Fatal(err)
		}
		if got := s[r.name]; got.Cur != l.Cur || got.Max != l.Max {
			t.Errorf("%s = %+v, want %+v", r.name, got, l)
		}
	}
}

func TestParseRefusesMalformed(t *testing.T) {
	good, err := os.ReadFile("/proc/self/limits")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parse(string(good)); err != nil {
		t.Fatalf("own limits: %v", err)
	}
	for _, bad := range []string{
		"",
		strings.Replace(string(good), "Max open files", "Max open filez", 1),
		strings.Replace(string(good), "Max core file size        0", "Max core file size        x", 1),
	} {
		if _, err := parse(bad); err == nil {
			t.Errorf("parsed %q", bad)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		s    Set
		want string
	}{
		{Set{"nofile": {Cur: 64, Max: 64}, "core": {Cur: 0, Max: Infinity}}, ""},
		{Set{"nofiles": {Cur: 1, Max: 1}}, "unknown resource"},
		{Set{"fsize": {Cur: 2, Max: 1}}, "above hard limit"},
		{nil, ""},
	} {
		err := tc.s.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate(%v) = %v, want %q", tc.s, err, tc.want)
		}
	}
	if err := (Set{"x": {}}).Validate(); !errors.Is(err, ErrUnknown) {
		t.Errorf("unknown resource: %v does not wrap ErrUnknown", err)
	}
}

// TestApplyInChild applies a set in a child (limits are per process, and
// a lowered hard limit does not come back) and checks what the command it
// executes sees: exactly the set, not the soft NOFILE the child's Go
// runtime found at its start (which it restores at an exec unless told
// otherwise), and a hard limit above the child's own lowered to it.
func TestApplyInChild(t *testing.T) {
	if os.Getenv("RLIMIT_TEST_CHILD") != "" {
		own, err := Of(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		over := own["stack"].Max
		if over != Infinity {
			over++
		}
		err = Apply(Set{"nofile": {Cur: 100, Max: own["nofile"].Max}, "core": {Cur: 0, Max: 4096}, "stack": {Cur: 1 << 20, Max: over}})
		if err != nil {
			t.Fatal(err)
		}
		t.Fatal(unix.Exec("/bin/sh", []string{"sh", "-c", "ulimit -Sn; ulimit -Hn; ulimit -Sc; ulimit -Hc; ulimit -Ss; ulimit -Hs"}, nil))
	}
	own, err := Of(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	nofile := own["nofile"]
	if nofile.Max < 2000 || nofile.Max == Infinity || own["core"].Max < 4096 {
		t.Skipf("own hard limits %+v do not suit the test", own)
	}
	// The child starts with a soft NOFILE well below its hard limit, so
	// that its Go runtime raises it and remembers 1000 to restore at exec.
	if err := unix.Prlimit(0, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 1000, Max: nofile.Max}, nil); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestApplyInChild$")
	cmd.Env = append(os.Environ(), "RLIMIT_TEST_CHILD=1")
	out, err := cmd.Output()
	if rerr := unix.Prlimit(0, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: nofile.Cur, Max: nofile.Max}, nil); rerr != nil {
		t.Fatal(rerr)
	}
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	stack := "unlimited"
	if m := own["stack"].Max; m != Infinity {
		stack = strconv.FormatUint(m/1024, 10) // sh's ulimit -s counts KiB
	}
	want := "100 " + strconv.FormatUint(nofile.Max, 10) + " 0 8 1024 " + stack // ulimit -c counts 512-byte blocks
	if got := strings.Join(strings.Fields(string(out)), " "); got != want {
		t.Errorf("command sees %q, want %q", got, want)
	}
}
