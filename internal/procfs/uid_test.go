package procfs

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

func TestRealUID(t *testing.T) {
	if uid, err := RealUID(os.Getpid()); err != nil || uid != uint32(os.Getuid()) {
		t.Fatalf("RealUID(self) = %d, %v; want %d", uid, err, os.Getuid())
	}
	if os.Geteuid() == 0 {
		cmd := exec.Command("sleep", "60")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Wait()
		defer cmd.Process.Kill()
		if uid, err := RealUID(cmd.Process.Pid); err != nil || uid != 65534 {
			t.Errorf("RealUID(a process of uid 65534) = %d, %v", uid, err)
		}
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := RealUID(cmd.Process.Pid); !errors.Is(err, ErrGone) {
		t.Errorf("RealUID(a reaped pid) = %v, want ErrGone", err)
	}
}
