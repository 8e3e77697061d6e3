package procfs

import (
	"bufio"
	"os/exec"
	"slices"
	"strconv"
	"testing"
)

// TestTreeOfMatchesScan is a three-level tree of real processes: TreeOf
// lists the same processes as a scan of /proc, root first, parents before
// their children; a gone root gives nothing.
func TestTreeOfMatchesScan(t *testing.T) {
	cmd := exec.Command("sh", "-c", `sleep 1000 & sh -c 'sleep 1000 & sleep 1000 & echo ready; wait' & wait`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range mustTreeOf(t, cmd.Process.Pid) {
			exec.Command("kill", "-9", strconv.Itoa(pid)).Run()
		}
		cmd.Wait()
	})
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil { // every process is forked by then
		t.Fatal(err)
	}
	root := cmd.Process.Pid
	got := mustTreeOf(t, root)
	scan, err := ScanTree()
	if err != nil {
		t.Fatal(err)
	}
	want := append([]int{root}, scan.Descendants(root)...)
	if len(got) != 5 || got[0] != root || !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
		t.Fatalf("TreeOf(%d) = %v; the scan says %v", root, got, want)
	}
	for i, pid := range got[1:] {
		st, err := ReadStat(pid)
		if err != nil || !slices.Contains(got[:i+1], st.PPID) {
			t.Fatalf("%d (parent %d) listed before its parent in %v", pid, st.PPID, got)
		}
	}
	if gone, err := TreeOf(1 << 30); err != nil || len(gone) != 0 {
		t.Fatalf("TreeOf(a pid that does not exist) = %v, %v", gone, err)
	}
}

func mustTreeOf(t *testing.T, root int) []int {
	t.Helper()
	pids, err := TreeOf(root)
	if err != nil {
		t.Fatal(err)
	}
	return pids
}
