package mps_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/mps"
	"github.com/gpusched/gpusched/internal/mps/mpstest"
)

// fake installs the fake control binary in a fresh directory and returns
// that directory and a Manager using it by path.
func fake(t *testing.T) (string, *mps.Manager) {
	t.Helper()
	bin := t.TempDir()
	path, err := mpstest.Install(bin)
	if err != nil {
		t.Fatal(err)
	}
	m := mps.New(mps.Config{Control: path, Dir: filepath.Join(t.TempDir(), "mps"), Ready: 2 * time.Second})
	t.Cleanup(func() { m.Close() })
	return bin, m
}

func calls(t *testing.T, dir string) []string {
	t.Helper()
	c, err := mpstest.Calls(dir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitStopped waits until the background stop has run.
func waitStopped(t *testing.T, m *mps.Manager) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for m.Running() {
		if time.Now().After(deadline) {
			t.Fatal("the control daemon was not stopped")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestMissingControl(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	dir := filepath.Join(t.TempDir(), "mps")
	for _, m := range []*mps.Manager{
		mps.New(mps.Config{Dir: dir}),
		mps.New(mps.Config{Control: filepath.Join(t.TempDir(), "nope"), Dir: dir}),
	} {
		if m.Available() {
			t.Fatal("available without the binary")
		}
		err := m.Check("mps_threads")
		if !errors.Is(err, mps.ErrUnavailable) || !strings.HasPrefix(err.Error(), "mps_threads needs NVIDIA MPS: nvidia-cuda-mps-control was not found") {
			t.Errorf("Check: %v", err)
		}
		if err := m.Acquire(context.Background(), "a"); !errors.Is(err, mps.ErrUnavailable) {
			t.Errorf("Acquire: %v", err)
		}
		if err := m.Adopt(context.Background(), nil); err != nil {
			t.Errorf("Adopt: %v", err)
		}
		m.Release("a")
		if len(m.Clients()) != 0 || m.Running() {
			t.Errorf("clients %v, running %v", m.Clients(), m.Running())
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directories made without MPS: %v", err)
	}
}

func TestFoundOnPATH(t *testing.T) {
	bin := t.TempDir()
	if _, err := mpstest.Install(bin); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":/usr/bin:/bin")
	m := mps.New(mps.Config{Dir: filepath.Join(t.TempDir(), "mps")})
	if !m.Available() || m.Check("mps_threads") != nil {
		t.Fatalf("not found on PATH: %v", m.Check("mps_threads"))
	}
}

// TestStartOnceStopAfterLast: the control daemon starts for the first
// client only, with the Manager's directories (0755), and stops in the
// background after the last one leaves; a later client starts it again.
func TestStartOnceStopAfterLast(t *testing.T) {
	bin, m := fake(t)
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if err := m.Acquire(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	c := calls(t, bin)
	if len(c) != 1 || c[0] != fmt.Sprintf("start %s %s", m.PipeDir(), filepath.Join(filepath.Dir(m.PipeDir()), "log")) {
		t.Fatalf("calls %q, want one start", c)
	}
	for _, dir := range []string{filepath.Dir(m.PipeDir()), m.PipeDir(), filepath.Join(filepath.Dir(m.PipeDir()), "log")} {
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: %v %v, want a 0755 directory", dir, fi.Mode(), err)
		}
	}
	if got := m.Clients(); fmt.Sprint(got) != "[a b]" {
		t.Errorf("clients %v", got)
	}
	m.Release("a")
	m.Release("a") // twice: no effect
	m.Release("zzz")
	if !m.Running() || mpstest.Count(calls(t, bin), "quit") != 0 {
		t.Fatalf("stopped with a client left: %q", calls(t, bin))
	}
	m.Release("b")
	waitStopped(t, m)
	if c := calls(t, bin); len(c) != 2 || c[1] != "quit "+m.PipeDir() {
		t.Fatalf("calls %q, want start then quit", c)
	}
	if err := m.Acquire(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if c := calls(t, bin); mpstest.Count(c, "start") != 2 || mpstest.Count(c, "fail") != 0 {
		t.Fatalf("calls %q, want a second start", c)
	}
}

func TestStartFailures(t *testing.T) {
	t.Run("already running", func(t *testing.T) {
		bin, m := fake(t)
		if err := os.MkdirAll(m.PipeDir(), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(m.PipeDir(), "control"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		err := m.Acquire(context.Background(), "a")
		if !errors.Is(err, mps.ErrUnavailable) || !strings.Contains(err.Error(), "already running") {
			t.Fatalf("Acquire: %v", err)
		}
		if len(m.Clients()) != 0 || m.Running() || mpstest.Count(calls(t, bin), "fail") != 1 {
			t.Errorf("clients %v, running %v, calls %q", m.Clients(), m.Running(), calls(t, bin))
		}
	})
	t.Run("no pipe", func(t *testing.T) {
		bin := t.TempDir()
		path := filepath.Join(bin, mpstest.Name)
		if err := os.WriteFile(path, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		m := mps.New(mps.Config{Control: path, Dir: filepath.Join(t.TempDir(), "mps"), Ready: 50 * time.Millisecond})
		defer m.Close()
		err := m.Acquire(context.Background(), "a")
		if !errors.Is(err, mps.ErrUnavailable) || !strings.Contains(err.Error(), "control pipe did not appear") {
			t.Fatalf("Acquire: %v", err)
		}
		if len(m.Clients()) != 0 {
			t.Errorf("clients %v", m.Clients())
		}
	})
}

// TestAdopt: after a restart the live clients are counted and the control
// daemon they use is kept until the last leaves; one no client needs is
// stopped at once.
func TestAdopt(t *testing.T) {
	bin, m := fake(t)
	ctx := context.Background()
	if err := m.Acquire(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	// A new Manager, as after a daemon restart, over the same directories.
	path := filepath.Join(bin, mpstest.Name)
	dir := filepath.Dir(m.PipeDir())
	m2 := mps.New(mps.Config{Control: path, Dir: dir})
	defer m2.Close()
	if err := m2.Adopt(ctx, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if !m2.Running() || fmt.Sprint(m2.Clients()) != "[a]" {
		t.Fatalf("adopted: running %v, clients %v", m2.Running(), m2.Clients())
	}
	if err := m2.Acquire(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if mpstest.Count(calls(t, bin), "start") != 1 {
		t.Fatalf("restarted an adopted control daemon: %q", calls(t, bin))
	}
	m2.Release("a")
	m2.Release("b")
	waitStopped(t, m2)

	// The control daemon left behind by a daemon whose clients all ended.
	if err := m2.Acquire(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	m3 := mps.New(mps.Config{Control: path, Dir: dir})
	defer m3.Close()
	if err := m3.Adopt(ctx, nil); err != nil {
		t.Fatal(err)
	}
	c := calls(t, bin)
	if m3.Running() || c[len(c)-1] != "quit "+m.PipeDir() {
		t.Fatalf("stale control daemon: running %v, calls %q", m3.Running(), c)
	}
	// Nothing to adopt, nothing running: no call at all.
	n := len(calls(t, bin))
	if err := m3.Adopt(ctx, nil); err != nil || len(calls(t, bin)) != n {
		t.Fatalf("Adopt with nothing: %v, calls %q", err, calls(t, bin))
	}
}

// TestConcurrentClients: clients coming and going concurrently leave the
// control daemon stopped, with every start matched by a quit.
func TestConcurrentClients(t *testing.T) {
	bin, m := fake(t)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5; i++ {
				id := fmt.Sprintf("%d-%d", g, i)
				if err := m.Acquire(context.Background(), id); err != nil {
					t.Error(err)
					return
				}
				m.Release(id)
			}
		}()
	}
	wg.Wait()
	m.Close()
	c := calls(t, bin)
	if m.Running() || mpstest.Count(c, "fail") != 0 || mpstest.Count(c, "start") != mpstest.Count(c, "quit") || mpstest.Count(c, "start") == 0 {
		t.Fatalf("running %v, calls %q", m.Running(), c)
	}
}

func TestClientEnv(t *testing.T) {
	_, m := fake(t)
	for _, tc := range []struct {
		threads int
		mib     uint64
		gpus    int
		want    string
	}{
		{threads: 50, mib: 4096, gpus: 1, want: "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M"},
		{threads: 25, mib: 8192, gpus: 2, want: "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8192M,1=8192M"},
		{threads: 10, gpus: 2, want: "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=10"},
		{mib: 1000, gpus: 3, want: "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1000M,1=1000M,2=1000M"},
	} {
		env := m.ClientEnv(tc.threads, tc.mib, tc.gpus)
		if env[mps.EnvPipeDir] != m.PipeDir() {
			t.Errorf("pipe dir %q", env[mps.EnvPipeDir])
		}
		var got []string
		for _, k := range []string{mps.EnvThreads, mps.EnvMemLimit} {
			if v, ok := env[k]; ok {
				got = append(got, k+"="+v)
			}
		}
		if strings.Join(got, " ") != tc.want || len(env) != len(got)+1 {
			t.Errorf("ClientEnv(%d, %d, %d) = %v, want %s", tc.threads, tc.mib, tc.gpus, env, tc.want)
		}
	}
	if s := mps.FormatMemLimits(0, 4096); s != "" {
		t.Errorf("no GPUs: %q", s)
	}
}

// TestRestartAfterDeath: a control daemon that vanished while clients ran
// is started again for the next client.
func TestRestartAfterDeath(t *testing.T) {
	bin, m := fake(t)
	ctx := context.Background()
	if err := m.Acquire(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(m.PipeDir(), "control")); err != nil {
		t.Fatal(err)
	}
	if err := m.Acquire(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if c := calls(t, bin); mpstest.Count(c, "start") != 2 {
		t.Fatalf("calls %q, want a second start", c)
	}
}
