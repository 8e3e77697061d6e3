package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Attacker is the hostile managed process of the red-team tests
// (attacker/attacker.c), built into a directory every user may read.
type Attacker struct {
	Bin     string // attacker [CMD ARGS...]: attacks, then execs CMD
	Preload string // the same attack in a constructor, for LD_PRELOAD
}

// BuildAttacker compiles the attacker program and library; it skips t
// without gcc.
func BuildAttacker(t testing.TB) Attacker {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc is needed to build the attacker: not found in PATH")
	}
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "gpusched-attacker")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(root, "internal", "testutil", "attacker", "attacker.c")
	a := Attacker{Bin: filepath.Join(dir, "attacker"), Preload: filepath.Join(dir, "attack.so")}
	for _, args := range [][]string{
		{"-O2", "-Wall", "-o", a.Bin, src},
		{"-O2", "-Wall", "-shared", "-fPIC", "-DPRELOAD", "-o", a.Preload, src},
	} {
		if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	return a
}
