package simgpu

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/procfs"
)

// Helper modes: the test binary re-executed with helperEnv set acts as a
// small process for tests that need real, separate processes.
const (
	helperEnv  = "SIMGPU_TEST_HELPER"
	helperDir  = "SIMGPU_TEST_DIR"
	helperUUID = "SIMGPU_TEST_UUID"
)

func TestMain(m *testing.M) {
	switch mode := os.Getenv(helperEnv); mode {
	case "":
		os.Exit(m.Run())
	case "wait":
		// Lives until stdin closes.
		_, _ = bufio.NewReader(os.Stdin).ReadString(0)
	case "alloc":
		helperAlloc()
	case "hold":
		helperHold()
	case "selfpid":
		pid, err := procfs.SelfPID()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("selfpid=%d getpid=%d\n", pid, os.Getpid())
	default:
		fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
		os.Exit(2)
	}
	os.Exit(0)
}

// helperAlloc prints "ready", waits for a line on stdin, allocates 1 MiB at a
// time until out of memory, prints "count N", and lives until stdin closes so
// that its record stays live.
func helperAlloc() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	reg, err := Open(os.Getenv(helperDir))
	if err != nil {
		fail(err)
	}
	pid, err := procfs.SelfPID()
	if err != nil {
		fail(err)
	}
	st, err := procfs.StartTime(pid)
	if err != nil {
		fail(err)
	}
	in := bufio.NewReader(os.Stdin)
	fmt.Println("ready")
	if _, err := in.ReadString('\n'); err != nil {
		fail(err)
	}
	n, err := allocUntilOOM(reg, pid, st, os.Getenv(helperUUID))
	if err != nil {
		fail(err)
	}
	fmt.Printf("count %d\n", n)
	_, _ = in.ReadString(0)
}

// helperHold allocates 100 MiB on its GPU for itself (which starts its
// restore thread), prints "ready", and lives until stdin closes.
func helperHold() {
	reg, err := Open(os.Getenv(helperDir))
	if err == nil {
		var pid int
		if pid, err = procfs.SelfPID(); err == nil {
			var st uint64
			if st, err = procfs.StartTime(pid); err == nil {
				err = reg.Allocate(pid, st, os.Getenv(helperUUID), 100)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString(0)
}

// helperCmd returns a command running the test binary in a helper mode. Under
// the race detector it skips the detector's one-second sleep at exit.
func helperCmd(mode string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Env = append(cmd.Env, helperEnv+"="+mode, "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	return cmd
}

// helperProc is a running helper process with its stdin and stdout.
type helperProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

// startHelper starts the test binary in a helper mode.
func startHelper(t *testing.T, mode string, env ...string) *helperProc {
	t.Helper()
	return startCmd(t, helperCmd(mode, env...))
}

// startCmd starts a helper command; its stderr goes to the test's unless
// set.
func startCmd(t *testing.T, cmd *exec.Cmd) *helperProc {
	t.Helper()
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helperProc{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	t.Cleanup(func() {
		_ = h.stdin.Close()
		_ = h.cmd.Wait()
	})
	return h
}

// line reads the helper's next stdout line.
func (h *helperProc) line(t *testing.T) string {
	t.Helper()
	if !h.out.Scan() {
		t.Fatalf("helper %d: stdout ended: %v", h.cmd.Process.Pid, h.out.Err())
	}
	return strings.TrimSpace(h.out.Text())
}
