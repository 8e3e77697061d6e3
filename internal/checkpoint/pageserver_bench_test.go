package checkpoint

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/testutil"
)

// diskWriteBandwidth writes size bytes sequentially into a new file in dir
// and syncs it, as `dd bs=1M conv=fdatasync` does, and returns bytes/s:
// the better of two runs, as a first write into freshly freed memory can
// be much slower in a VM.
func diskWriteBandwidth(tb testing.TB, dir string, size int) float64 {
	tb.Helper()
	block := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range block {
		block[i] = byte(rng.Uint32())
	}
	path := filepath.Join(dir, "dd.bin")
	defer os.Remove(path)
	best := 0.0
	for range 2 {
		start := time.Now()
		f, err := os.Create(path)
		if err != nil {
			tb.Fatal(err)
		}
		for n := 0; n < size; n += len(block) {
			if _, err := f.Write(block); err != nil {
				tb.Fatal(err)
			}
		}
		if err := f.Sync(); err != nil {
			tb.Fatal(err)
		}
		f.Close()
		best = max(best, float64(size)/time.Since(start).Seconds())
	}
	return best
}

// BenchmarkPageServerFirstDump sends a 1 GiB process's pages to a page
// server without a parent, as CRIU's dump would (from a client in this
// process, over loopback TCP), and compares the throughput, fsync
// included, with the disk's sequential write bandwidth measured the dd way
// in the same directory. ns/op is one dump.
func BenchmarkPageServerFirstDump(b *testing.B) {
	const size = 1 << 30
	root := b.TempDir()
	src := make([]byte, 64<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	key := pagemapKey{id: 1}
	var dump time.Duration
	var ddBps float64
	b.StopTimer()
	for i := range b.N {
		ddBps += diskWriteBandwidth(b, root, size)
		dir := psImagesDir(b, root, strconv.Itoa(i))
		b.StartTimer()
		start := time.Now()
		ps, err := startPageServer(dir, "")
		if err != nil {
			b.Fatal(err)
		}
		c := dialPageServer(b, ps)
		c.open(key)
		for off := 0; off < size; off += len(src) {
			// CRIU sends runs of at most a pipe's worth (1 MiB here).
			for p := 0; p < len(src); p += 1 << 20 {
				c.add(key, uint64(0x10000000+off+p), src[p:p+1<<20])
			}
		}
		if st := c.finish(); st != 0 {
			b.Fatalf("CLOSE status %d", st)
		}
		if _, err := ps.Wait(context.Background()); err != nil {
			b.Fatal(err)
		}
		dump += time.Since(start)
		b.StopTimer()
		os.RemoveAll(dir)
	}
	mbps := float64(b.N) * size / dump.Seconds() / 1e6
	dd := ddBps / float64(b.N) / 1e6
	b.ReportMetric(mbps, "dump-MB/s")
	b.ReportMetric(dd, "dd-MB/s")
	b.ReportMetric(mbps/dd, "dump/dd")
}

// BenchmarkPageServerCRIUDump dumps a job holding 1 GiB of patterned host
// memory with CRIU (leaving it running), through a page server process
// without a parent (the daemon's way, its start included) and, for
// comparison, straight into an images directory as CRIU does by itself
// (then synced), and measures the disk's write bandwidth the dd way in the
// same directory. It reports the throughputs (the job's
// pages over each dump's wall time) and their ratios; ns/op is one round
// of all three.
func BenchmarkPageServerCRIUDump(b *testing.B) {
	criu := testutil.CRIU(b)
	root := b.TempDir()
	j := startCRIUJob(b, criu, root, 1024)
	var viaServer, local, dd time.Duration
	var bytes uint64
	b.ResetTimer()
	for i := range b.N {
		dd += time.Duration(float64(time.Second) * float64(1<<30) / diskWriteBandwidth(b, root, 1<<30))

		dir := psImagesDir(b, root, "ps"+strconv.Itoa(i))
		start := time.Now()
		ps, err := startPageServerProcess(b, dir, "", 0)
		if err != nil {
			b.Fatal(err)
		}
		j.dumpThrough(ps, dir, LeaveRunning)
		st, err := ps.Wait(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		viaServer += time.Since(start)
		bytes += st.Pages * pageSize
		os.RemoveAll(dir)

		dir = psImagesDir(b, root, "local"+strconv.Itoa(i))
		start = time.Now()
		j.runCRIU("dump", "-t", strconv.Itoa(j.pid), "-D", dir, "--leave-running", "-o", "dump.log")
		syncFS(b, dir) // CRIU does not sync its images; the page server does

		local += time.Since(start)
		os.RemoveAll(dir)
	}
	mbps := func(n uint64, d time.Duration) float64 { return float64(n) / d.Seconds() / 1e6 }
	server, crLocal, disk := mbps(bytes, viaServer), mbps(bytes, local), mbps(uint64(b.N)<<30, dd)
	b.ReportMetric(server, "server-MB/s")
	b.ReportMetric(crLocal, "criu-local-MB/s")
	b.ReportMetric(disk, "dd-MB/s")
	b.ReportMetric(server/disk, "server/dd")
	b.ReportMetric(server/crLocal, "server/criu-local")
}

// syncFS flushes the file system that holds dir.
func syncFS(tb testing.TB, dir string) {
	tb.Helper()
	f, err := os.Open(dir)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		tb.Fatal(err)
	}
}
