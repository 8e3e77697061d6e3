package daemon

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
)

// BenchmarkDiskTierCharge measures whose cgroup pays for a user's disk
// tier: a real user's loop of hibernate and thaw from disk (streamed, the
// default) of a job holding 1 GiB of host memory, through the CLI started
// in a cgroup of the user's, with the built daemon in a cgroup of its own
// beside it. It reports the CPU each cgroup spent over the loop, as a
// fraction of one CPU and per cycle: the daemon's, which serves every user
// and is held to no share, and the user's. Two layouts: "delegated", the
// user's cgroup delegated to them (--user-cgroups), where their trees and
// CRIU run; "caller", none delegated (--user-cgroups none), where CRIU
// runs in the caller's cgroup. Each op is one cycle (-benchtime 12x).
func BenchmarkDiskTierCharge(b *testing.B) {
	for _, layout := range []string{"delegated", "caller"} {
		b.Run(layout, func(b *testing.B) { benchDiskTierCharge(b, layout == "delegated") })
	}
}

func benchDiskTierCharge(b *testing.B, delegated bool) {
	const hostMiB = 1024
	if avail := memAvailableMiB(b); avail < 3*hostMiB {
		b.Skipf("%d MiB of memory available; the job, its image's page cache and CRIU's need %d", avail, 3*hostMiB)
	}
	_, top := testutil.CgroupTop(b)
	u := testutil.NewUser(b, "gschargeu", "gscharge")
	own := userCgroup(b, top, u, true)
	daemons := filepath.Join(top, "daemon")
	if err := os.Mkdir(daemons, 0o755); err != nil {
		b.Fatal(err)
	}
	h := prepareHarness(b, func(c *config.Config) {
		c.CheckpointDriver, c.Sim, c.CRIU = config.DriverSim, "1x24G", testutil.CRIU(b)
	})
	users := config.CgroupNone
	if delegated {
		users = filepath.Join(top, "user-%U")
	}
	h.spawnBinary(inSlice(b, daemons, h.bins.Daemon, append(h.binaryArgs(), "--group", u.Group, "--cgroup-root", config.CgroupNone, "--user-cgroups", users)...))
	waitSocket(b, h.cfg.Socket)
	h.ctlInCgroup(u, own, "run", "--dir", "/", "job", "--", h.bins.SimJob, "--vram", "64", "--host-mem", "1024", "--tick", "0.1")
	h.followCount("job", "simjob: host memory", 1)

	daemon0, user0, start := testutil.CgroupCPU(b, daemons), testutil.CgroupCPU(b, own), time.Now()
	for b.Loop() {
		h.ctlInCgroup(u, own, "hibernate", "job")
		h.ctlInCgroup(u, own, "thaw", "job")
	}
	wall := time.Since(start)
	daemonCPU := time.Duration(testutil.CgroupCPU(b, daemons)-daemon0) * time.Microsecond
	userCPU := time.Duration(testutil.CgroupCPU(b, own)-user0) * time.Microsecond
	b.Logf("%d cycles in %v: the daemon's cgroup %v of CPU, the user's %v", b.N, wall.Round(time.Millisecond), daemonCPU.Round(time.Millisecond), userCPU.Round(time.Millisecond))
	b.ReportMetric(daemonCPU.Seconds()/wall.Seconds(), "daemon-cpus")
	b.ReportMetric(userCPU.Seconds()/wall.Seconds(), "user-cpus")
	b.ReportMetric(float64(daemonCPU.Milliseconds())/float64(b.N), "daemon-ms/cycle")
	b.ReportMetric(float64(userCPU.Milliseconds())/float64(b.N), "user-ms/cycle")
}
