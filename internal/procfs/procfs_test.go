package procfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	if os.Getenv("PROCFS_TEST_SELFPID") != "" {
		pid, err := SelfPID()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("selfpid=%d getpid=%d\n", pid, os.Getpid())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestParseStat(t *testing.T) {
	tail := " 11083 2943 0 -1 4194304 101 0 0 0 0 0 0 0 20 0 1 0 987654 3133440 383"
	tests := []struct {
		name  string
		line  string
		state byte
		ppid  int
		start uint64
		ok    bool
	}{
		{"plain", "42 (simjob) S 1" + tail, 'S', 1, 987654, true},
		{"spaces and parens in comm", "42 (a ) b) (c) Z 7" + tail, 'Z', 7, 987654, true},
		{"no paren", "42 simjob S 1" + tail, 0, 0, 0, false},
		{"short", "42 (simjob) S 1 0 0", 0, 0, 0, false},
		{"bad start", "42 (x) S 1" + strings.Replace(tail, "987654", "x", 1), 0, 0, 0, false},
		{"bad state", "42 (x) SS 1" + tail, 0, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := parseStat(42, []byte(tt.line))
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
			if tt.ok && (st.State != tt.state || st.PPID != tt.ppid || st.StartTime != tt.start) {
				t.Errorf("got %+v", st)
			}
		})
	}
}

func TestIdentityOfRealProcesses(t *testing.T) {
	if st, err := StartTime(os.Getpid()); err != nil || st == 0 {
		t.Fatalf("StartTime(self) = %d, %v", st, err)
	}
	cmd := exec.Command("sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	start, err := StartTime(pid)
	if err != nil || !Alive(pid, start) || Alive(pid, start+1) {
		t.Fatalf("live child: start %d err %v", start, err)
	}
	tree, err := ScanTree()
	if err != nil {
		t.Fatal(err)
	}
	if c := tree.Children(os.Getpid()); !slices.Contains(c, pid) {
		t.Fatalf("children of the test %v lack %d", c, pid)
	}
	found := false
	for _, d := range tree.Descendants(os.Getpid()) {
		found = found || d == pid
	}
	if !found {
		t.Fatal("child not among descendants")
	}
	cmd.Process.Kill()
	// Wait for it to become a zombie without reaping it: a zombie is not alive.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if Alive(pid, start) {
		t.Fatal("zombie reported alive")
	}
	cmd.Wait()
	if _, err := StartTime(pid); !errors.Is(err, ErrGone) {
		t.Fatalf("StartTime of a reaped process: %v, want ErrGone", err)
	}
}

func TestBootID(t *testing.T) {
	id, err := BootID()
	if err != nil || len(id) != 36 {
		t.Fatalf("BootID() = %q, %v", id, err)
	}
}

func TestSelfPID(t *testing.T) {
	pid, err := SelfPID()
	if err != nil || pid != os.Getpid() {
		t.Fatalf("SelfPID() = %d, %v; want %d", pid, err, os.Getpid())
	}
}

// TestSelfPIDInPIDNamespace checks that a process in its own PID namespace
// (with the host's /proc) learns its host pid, as the simulated GPU job must.
func TestSelfPIDInPIDNamespace(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PROCFS_TEST_SELFPID=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		if errors.Is(err, syscall.EPERM) {
			t.Skip("creating a PID namespace needs CAP_SYS_ADMIN")
		}
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("selfpid=%d getpid=1\n", cmd.Process.Pid); out.String() != want {
		t.Fatalf("in a PID namespace: %q, want %q", out.String(), want)
	}
}

// TestStatPathOfSelfThroughHostProc: a process reading another proc mount
// (UseHostProc) reads its own stat through its own /proc, the one file of
// it CRIU can restore if a dump finds it open.
func TestStatPathOfSelfThroughHostProc(t *testing.T) {
	defer func(r string) { root = r }(root)
	root = "/proc/." // another path to a proc mount, as the host's bound in a tree is
	if got := fileOf(os.Getpid(), "/stat"); got != "/proc/self/stat" {
		t.Errorf("own stat: %s, want /proc/self/stat", got)
	}
	if got := fileOf(1, "/stat"); got != "/proc/./1/stat" {
		t.Errorf("pid 1's stat: %s, want /proc/./1/stat", got)
	}
	if st, err := ReadStat(os.Getpid()); err != nil || st.PID != os.Getpid() {
		t.Errorf("ReadStat(self) = %+v, %v", st, err)
	}
}

// TestParseBootOffset: timens_offsets as the kernel prints it
// (kernel/time/namespace.c, show_offset: "%-10s %10lld %9ld\n").
func TestParseBootOffset(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     int64
	}{
		{"host", "monotonic           0         0\nboottime            0         0\n", 0},
		{"restored", "monotonic        -120         0\nboottime         3600 500000000\n", 360050},
		{"behind", "boottime           -2 990000000\nmonotonic           0         0\n", -101},
		{"no boottime", "monotonic           7         0\n", 0},
		{"malformed", "boottime x 0\n", 0},
		{"empty", "", 0},
	} {
		if got := parseBootOffset([]byte(c.in)); got != c.want {
			t.Errorf("%s: %d ticks, want %d", c.name, got, c.want)
		}
	}
}

// TestStatParsingAllocatesNothing: stat is read for every peer and every
// liveness check; its fields are not gathered into a slice of all 52.
func TestStatParsingAllocatesNothing(t *testing.T) {
	line := []byte("42 (simjob) S 1 42 42 0 -1 4194560 131 0 0 0 0 0 0 0 20 0 1 0 987654 4321 55 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n")
	offsets := []byte("monotonic           0         0\nboottime         3600 500000000\n")
	if n := testing.AllocsPerRun(100, func() {
		if s, err := parseStat(42, line); err != nil || s.StartTime != 987654 {
			t.Fatalf("%+v, %v", s, err)
		}
		if parseBootOffset(offsets) != 360050 {
			t.Fatal("offset misread")
		}
	}); n != 0 {
		t.Errorf("%v allocations a parse", n)
	}
}
