package simgpu

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
)

func TestParseStat(t *testing.T) {
	tail := " 11083 2943 0 -1 4194304 101 0 0 0 0 0 0 0 20 0 1 0 987654 3133440 383"
	for _, tc := range []struct {
		name  string
		line  string
		state byte
		start uint64
		ok    bool
	}{
		{"plain", "42 (simjob) S 1" + tail, 'S', 987654, true},
		{"spaces and parens in comm", "42 (a ) b) (c) Z 1" + tail, 'Z', 987654, true},
		{"no paren", "42 simjob S 1" + tail, 0, 0, false},
		{"short", "42 (simjob) S 1 0 0", 0, 0, false},
		{"bad start", "42 (x) S 1" + strings.Replace(tail, "987654", "x", 1), 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := parseStat(42, []byte(tc.line))
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && (st.state != tc.state || st.start != tc.start) {
				t.Errorf("got %c %d, want %c %d", st.state, st.start, tc.state, tc.start)
			}
		})
	}
}

func TestStartTime(t *testing.T) {
	if st, err := StartTime(os.Getpid()); err != nil || st == 0 {
		t.Errorf("StartTime(self) = %d, %v", st, err)
	}
	h := startHelper(t, "wait")
	pid := h.cmd.Process.Pid
	if _, err := StartTime(pid); err != nil {
		t.Fatal(err)
	}
	_ = h.stdin.Close()
	if err := h.cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := StartTime(pid); !errors.Is(err, ErrNoSuchProcess) {
		t.Errorf("StartTime of a reaped process: %v, want ErrNoSuchProcess", err)
	}
}

func TestSelfPID(t *testing.T) {
	pid, err := SelfPID()
	if err != nil || pid != os.Getpid() {
		t.Errorf("SelfPID() = %d, %v; want %d", pid, err, os.Getpid())
	}
}

func TestSelfPIDInPIDNamespace(t *testing.T) {
	cmd := helperCmd("selfpid")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	cmd.Stderr = os.Stderr
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
	want := fmt.Sprintf("selfpid=%d getpid=1\n", cmd.Process.Pid)
	if out.String() != want {
		t.Errorf("helper in a PID namespace printed %q, want %q", out.String(), want)
	}
}
