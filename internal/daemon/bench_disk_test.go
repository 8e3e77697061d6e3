package daemon

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/pkg/api"
)

// diskBenchMiB is the host memory of the hibernated process.
const diskBenchMiB = 1024

// BenchmarkDiskTier hibernates a process holding 1 GiB of patterned host
// memory and thaws it from disk, against the sequential write and read
// bandwidth of the snapshot directory measured in the same run
// (diskBandwidth). It reports
// dump-MB/s and restore-MB/s with their ratio to the disk's (target >=
// 0.7), and the bytes a repeat hibernate of the unchanged process writes
// as a fraction of the first (target < 0.1).
func BenchmarkDiskTier(b *testing.B) {
	h := newDiskHarness(b, config.DriverSim)
	c := h.client()
	wbw, rbw := diskBandwidth(b, h.cfg.Snapshots(), diskBenchMiB)
	h.memJob("big", 0, diskBenchMiB)
	var dumps, restores, repeats []float64
	for b.Loop() {
		full := true
		first, err := c.Hibernate(ctxT(b), api.HibernateParams{Name: "big", Full: full})
		if err != nil {
			b.Fatal(err)
		}
		dropCaches(b)
		th, err := c.Thaw(ctxT(b), api.ThawParams{Name: "big"})
		if err != nil {
			b.Fatal(err)
		}
		again, err := c.Hibernate(ctxT(b), api.HibernateParams{Name: "big"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Thaw(ctxT(b), api.ThawParams{Name: "big"}); err != nil {
			b.Fatal(err)
		}
		mib := float64(first.Bytes) / (1 << 20)
		dumpMS := first.MS["dump"] + first.MS["sync"] // durable, as the disk probe's fsync
		dumps = append(dumps, mib/(dumpMS/1000))
		restores = append(restores, mib/(th.MS["criu_restore"]/1000))
		repeats = append(repeats, float64(again.Written)/float64(first.Written))
		b.Logf("image %.0f MiB: dump+sync %.0f ms (%.0f MiB/s), restore %.0f ms (%.0f MiB/s); repeat wrote %d of %d bytes, %d of %d pages reused",
			mib, dumpMS, dumps[len(dumps)-1], th.MS["criu_restore"], restores[len(restores)-1],
			again.Written, first.Written, again.Reused, again.Pages)
	}
	dump, restore, repeat := median(dumps), median(restores), median(repeats)
	b.ReportMetric(dump, "dump-MiB/s")
	b.ReportMetric(dump/wbw, "dump/disk-write")
	b.ReportMetric(restore, "restore-MiB/s")
	b.ReportMetric(restore/rbw, "restore/disk-read")
	b.ReportMetric(repeat, "repeat-written-fraction")
	b.Logf("disk: sequential write %.0f MiB/s, cold read %.0f MiB/s; hibernate %.0f MiB/s (%.2fx, target >= 0.7), thaw from disk %.0f MiB/s (%.2fx, target >= 0.7); repeat hibernate wrote %.4f of the first (target < 0.1)",
		wbw, rbw, dump, dump/wbw, restore, restore/rbw, repeat)
}

// diskBandwidth measures the snapshot directory's sequential bandwidth
// with mib MiB: written in 4 MiB blocks and fsynced, and read back after
// dropping the page cache, each both through the page cache and with
// O_DIRECT; the faster of the two each way is the disk's figure (MiB/s).
func diskBandwidth(b *testing.B, dir string, mib int) (write, read float64) {
	b.Helper()
	path := filepath.Join(dir, "bandwidth-probe")
	defer os.Remove(path)
	const block = 4 << 20
	mem, err := unix.Mmap(-1, 0, block, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Munmap(mem) // page-aligned, as O_DIRECT needs
	for i := range mem {
		mem[i] = byte(i*7 + i>>8)
	}
	for _, flags := range []int{0, unix.O_DIRECT} {
		os.Remove(path)
		t := time.Now()
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|flags, 0o600)
		if err != nil {
			b.Logf("probe with flags %#x: %v", flags, err)
			continue
		}
		for range mib / 4 {
			if _, err := f.Write(mem); err != nil {
				b.Fatal(err)
			}
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		f.Close()
		write = max(write, float64(mib)/time.Since(t).Seconds())
		dropCaches(b)
		t = time.Now()
		if f, err = os.OpenFile(path, os.O_RDONLY|flags, 0); err != nil {
			b.Fatal(err)
		}
		var n int
		for {
			k, err := f.Read(mem)
			n += k
			if err != nil || k == 0 {
				break
			}
		}
		f.Close()
		if n != mib<<20 {
			b.Fatalf("read back %d bytes of %d", n, mib<<20)
		}
		read = max(read, float64(mib)/time.Since(t).Seconds())
	}
	return write, read
}

// dropCaches empties the page cache so reads come from the disk.
func dropCaches(b *testing.B) {
	b.Helper()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
		b.Logf("cannot drop the page cache (%v): reads may come from memory", err)
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
