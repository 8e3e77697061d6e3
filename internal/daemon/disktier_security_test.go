package daemon

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestDiskTierNonRoot: a non-root caller neither sees nor touches root's
// snapshots and processes through the disk tier, and may not pin or raise
// a priority even on its own process.
func TestDiskTierNonRoot(t *testing.T) {
	nobody, group := nobodyUser(t)
	criu := testutil.CRIU(t)
	h := newCkptHarness(t, config.DriverSim, func(c *config.Config) { c.Group, c.CRIU = group.Name, criu })
	h.memJob("rootjob", 64, 1)
	hr, err := h.client().Hibernate(ctxT(t), api.HibernateParams{Name: "rootjob"})
	if err != nil {
		t.Fatal(err)
	}

	out, errOut, code := h.asUser(nobody, "--json", "snapshots")
	var res api.SnapshotsResult
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || len(res.Snapshots) != 0 {
		t.Fatalf("snapshots as nobody: %q %q (exit %d)", out, errOut, code)
	}
	for _, args := range [][]string{
		{"snapshot", "rm", hr.Snapshot},
		{"hibernate", "root/rootjob"},
		{"thaw", "root/rootjob"},
		{"fork", "root/rootjob", "--copies", "1"},
		{"set", "root/rootjob", "--ttl", "1m"},
	} {
		if _, stderr, code := h.asUser(nobody, args...); code == 0 || !strings.Contains(stderr, string(api.CodePermissionDenied)) {
			t.Fatalf("%v as nobody: exit %d, %q; want permission_denied", args, code, stderr)
		}
	}
	if _, stderr, code := h.asUser(nobody, "run", "--dir", "/", "mine", "--", "sleep", "1000"); code != 0 {
		t.Fatalf("run as nobody: %q", stderr)
	}
	for _, args := range [][]string{{"set", "mine", "--pin"}, {"set", "mine", "--priority", "5"}} {
		if _, stderr, code := h.asUser(nobody, args...); code == 0 || !strings.Contains(stderr, string(api.CodePermissionDenied)) {
			t.Fatalf("%v as nobody: exit %d, %q; want permission_denied", args, code, stderr)
		}
	}
	if _, stderr, code := h.asUser(nobody, "set", "mine", "--priority", "-3", "--ttl", "1h"); code != 0 {
		t.Fatalf("lowering its own priority: %q", stderr)
	}
	if p := h.proc("rootjob"); p.State != api.StateHibernated || p.Snapshot != hr.Snapshot {
		t.Fatalf("root's process after nobody's attempts: %+v", p)
	}
}
