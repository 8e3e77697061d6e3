package daemon

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/stats"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/lazypages"
	"github.com/gpusched/gpusched/internal/testutil/rank"
	"github.com/gpusched/gpusched/pkg/api"
)

// BenchmarkDiskTier hibernates a process holding 256 MiB, 1 GiB and 4 GiB
// of patterned host memory and thaws it from disk, against the snapshot
// directory's sequential bandwidth measured in the same iteration
// (diskBandwidth). It reports dump and restore MiB/s with their ratios to
// the disk's (targets >= 0.8 and >= 0.7: the median of the iterations'
// ratios, with their range logged), and the bytes a repeat hibernate of the
// unchanged process writes as a fraction of the first (target < 0.1). The
// process's memory is verified after every thaw. Each size thaws three
// ways: criu (--stream-restore=false: CRIU reads the pages), streamed (the
// default: our page source brings them in before the process resumes) and
// lazy (--lazy-restore), which also reports the time until the process
// runs again (target < 200 ms) and until all its memory is back against
// the disk's read time of the image (target <= 1.3). The restore MiB/s of
// streamed and lazy counts up to all memory back. make bench runs it with
// -benchtime 3x; `-bench 'DiskTier/1GiB'` picks one size.
func BenchmarkDiskTier(b *testing.B) {
	for _, mib := range []int{256, 1024, 4096} {
		name := fmt.Sprintf("%dMiB", mib)
		if mib >= 1024 {
			name = fmt.Sprintf("%dGiB", mib/1024)
		}
		b.Run(name, func(b *testing.B) {
			for _, mode := range []string{"criu", "streamed", "lazy"} {
				b.Run(mode, func(b *testing.B) { benchDiskTier(b, mib, mode) })
			}
		})
	}
}

func benchDiskTier(b *testing.B, mib int, mode string) {
	lazy := mode == "lazy"
	// The process, the page cache of its image and the probe's file.
	if avail := memAvailableMiB(b); avail < 3*mib {
		b.Skipf("%d MiB of memory available; %d MiB needs %d", avail, mib, 3*mib)
	}
	h := newDiskHarness(b, config.DriverSim, func(c *config.Config) { c.LazyRestore, c.StreamRestore = lazy, mode == "streamed" })
	c := h.client()
	h.memJob("big", 0, mib)
	verified := 0
	verify := func() { // the thawed process checks every word of its memory
		b.Helper()
		if _, err := c.Kill(ctxT(b), api.KillParams{Name: "big", Signal: "SIGUSR1"}); err != nil {
			b.Fatal(err)
		}
		verified++
		h.followCount("big", "simjob: host memory verified", verified)
	}
	var dumps, restores, dumpRatios, restoreRatios, repeats, running, allMemory []float64
	for b.Loop() {
		b.StopTimer()
		wbw, rbw := diskBandwidth(b, h.cfg.Snapshots(), mib)
		b.StartTimer()
		first, err := c.Hibernate(ctxT(b), api.HibernateParams{Name: "big", Full: true})
		if err != nil {
			b.Fatal(err)
		}
		dropCaches(b)
		th, err := c.Thaw(ctxT(b), api.ThawParams{Name: "big"})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		verify()
		logCRIUStats(b, filepath.Join(h.cfg.Snapshots(), first.Snapshot))
		if mode != "criu" { // where the server's time went
			if lg, err := os.ReadFile(filepath.Join(h.cfg.Snapshots(), first.Snapshot, lazypages.LogName)); err == nil {
				b.Logf("%s", bytes.TrimSpace(lg))
			}
		}
		b.StartTimer()
		again, err := c.Hibernate(ctxT(b), api.HibernateParams{Name: "big"})
		if err != nil {
			b.Fatal(err)
		}
		th2, err := c.Thaw(ctxT(b), api.ThawParams{Name: "big"})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		verify()
		if lazy {
			b.Logf("repeat thaw, at once after its hibernate: %.0f ms, running again after %.0f ms", th2.MS["total"], th2.MS["running"])
		} else {
			b.Logf("repeat thaw, at once after its hibernate: %.0f ms", th2.MS["total"])
		}
		b.StartTimer()
		size := float64(first.Bytes) / (1 << 20)
		dumpMS := first.MS["dump"] + first.MS["sync"] // durable, as the probe's fsync
		dumps = append(dumps, size/(dumpMS/1000))
		restoreMS := th.MS["criu_restore"]
		if mode != "criu" && th.MS["all_memory"] == 0 {
			b.Logf("%s: the thaw fell back to CRIU's reads (see the daemon's log): %v", mode, th.MS)
		} else if mode == "streamed" {
			restoreMS = th.MS["all_memory"]
			b.Logf("streamed: all memory back after %.0f ms (criu restore %.0f ms, of which the page server's start %.0f ms), %.2fx the disk's read time; the thaw took %.0f ms",
				restoreMS, th.MS["criu_restore"], th.MS["lazy_pages_start"], (restoreMS/1000)/(size/rbw), th.MS["total"])
		} else if lazy {
			restoreMS = th.MS["all_memory"]
			running = append(running, th.MS["running"])
			allMemory = append(allMemory, (restoreMS/1000)/(size/rbw))
			b.Logf("lazy: running again after %.0f ms (criu restore %.0f ms, of which the lazy-pages server's start %.0f ms), all memory back after %.0f ms, %.2fx the disk's read time",
				th.MS["running"], th.MS["criu_restore"], th.MS["lazy_pages_start"], restoreMS, allMemory[len(allMemory)-1])
		}
		restores = append(restores, size/(restoreMS/1000))
		dumpRatios = append(dumpRatios, dumps[len(dumps)-1]/wbw)
		restoreRatios = append(restoreRatios, restores[len(restores)-1]/rbw)
		repeats = append(repeats, float64(again.Written)/float64(first.Written))
		b.Logf("image %.0f MiB: disk write %.0f MiB/s, read %.0f MiB/s; dump+sync %.0f ms (%.0f MiB/s, %.2fx), restore %.0f ms (%.0f MiB/s, %.2fx); repeat wrote %d of %d bytes, %d of %d pages reused",
			size, wbw, rbw, dumpMS, dumps[len(dumps)-1], dumpRatios[len(dumpRatios)-1],
			restoreMS, restores[len(restores)-1], restoreRatios[len(restoreRatios)-1],
			again.Written, first.Written, again.Reused, again.Pages)
	}
	b.ReportMetric(median(dumps), "dump-MiB/s")
	b.ReportMetric(median(dumpRatios), "dump/disk-write")
	b.ReportMetric(median(restores), "restore-MiB/s")
	b.ReportMetric(median(restoreRatios), "restore/disk-read")
	b.ReportMetric(median(repeats), "repeat-written-fraction")
	if len(running) > 0 {
		b.ReportMetric(median(running), "lazy-running-ms")
		b.ReportMetric(median(allMemory), "lazy-all-memory/disk-read")
	}
	b.Logf("%d MiB: hibernate %.0f MiB/s, %.2fx the disk (%.2f-%.2f; target >= 0.8); thaw from disk %.0f MiB/s, %.2fx (%.2f-%.2f; target >= 0.7); repeat hibernate wrote %.4f of the first (target < 0.1); memory verified after %d thaws",
		mib, median(dumps), median(dumpRatios), slices.Min(dumpRatios), slices.Max(dumpRatios),
		median(restores), median(restoreRatios), slices.Min(restoreRatios), slices.Max(restoreRatios), median(repeats), verified)
}

// logCRIUStats logs CRIU's own phase times of the dump and the restore of
// the image in dir, from its stats-dump and stats-restore images (two u32
// magics, the u32 size, a stats_entry message: criu/stats.c).
func logCRIUStats(b *testing.B, dir string) {
	read := func(name string) *stats.StatsEntry {
		buf, err := os.ReadFile(filepath.Join(dir, name))
		st := &stats.StatsEntry{}
		if err == nil && len(buf) >= 12 && int(binary.LittleEndian.Uint32(buf[8:]))+12 <= len(buf) {
			err = proto.Unmarshal(buf[12:12+binary.LittleEndian.Uint32(buf[8:])], st)
		}
		if err != nil {
			b.Logf("criu %s: %v", name, err)
		}
		return st
	}
	ds, rs := read("stats-dump").GetDump(), read("stats-restore").GetRestore()
	b.Logf("criu dump: frozen %d ms, memdump %d ms (of which memwrite %d ms), %d pages written; restore: %d ms, %d pages restored",
		ds.GetFrozenTime()/1000, ds.GetMemdumpTime()/1000, ds.GetMemwriteTime()/1000, ds.GetPagesWritten(),
		rs.GetRestoreTime()/1000, rs.GetPagesRestored())
}

// diskBandwidth measures the snapshot directory's sequential bandwidth
// with a file of mib MiB, three ways each: through the page cache, with
// O_DIRECT one 4 MiB request at a time, and with O_DIRECT four 4 MiB
// requests in flight (as fio --iodepth=4). Writes are fsynced and counted
// with the fsync; reads start after the page cache is dropped. The best
// of the three each way is the disk's figure (MiB/s).
func diskBandwidth(b *testing.B, dir string, mib int) (write, read float64) {
	b.Helper()
	path := filepath.Join(dir, "bandwidth-probe")
	defer os.Remove(path)
	const block = 4 << 20
	for _, way := range []struct {
		flags, depth int
	}{{0, 1}, {unix.O_DIRECT, 1}, {unix.O_DIRECT, 4}} {
		os.Remove(path)
		t := time.Now()
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|way.flags, 0o600)
		if err != nil {
			b.Fatal(err)
		}
		probeIO(b, f, mib<<20, block, way.depth, true)
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		f.Close()
		write = max(write, float64(mib)/time.Since(t).Seconds())
		dropCaches(b)
		t = time.Now()
		if f, err = os.OpenFile(path, os.O_RDONLY|way.flags, 0); err != nil {
			b.Fatal(err)
		}
		probeIO(b, f, mib<<20, block, way.depth, false)
		f.Close()
		read = max(read, float64(mib)/time.Since(t).Seconds())
	}
	return write, read
}

// probeIO writes or reads size bytes of f sequentially in blocks, depth
// requests at a time, from page-aligned buffers as O_DIRECT needs.
func probeIO(b *testing.B, f *os.File, size, block, depth int, write bool) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, depth)
	for range depth {
		wg.Go(func() {
			mem, err := unix.Mmap(-1, 0, block, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
			if err != nil {
				errs <- err
				return
			}
			defer unix.Munmap(mem)
			for i := range mem {
				mem[i] = byte(i*7 + i>>8)
			}
			for {
				off := next.Add(int64(block)) - int64(block)
				if off >= int64(size) {
					return
				}
				var n int
				if write {
					n, err = f.WriteAt(mem, off)
				} else {
					n, err = f.ReadAt(mem, off)
				}
				if err != nil || n != block {
					errs <- fmt.Errorf("probe at %d: %d bytes: %v", off, n, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// memAvailableMiB is the kernel's estimate of the memory available.
func memAvailableMiB(b *testing.B) int {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kib, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(v, "kB")))
			if err != nil {
				b.Fatal(err)
			}
			return kib >> 10
		}
	}
	b.Fatal("no MemAvailable in /proc/meminfo")
	return 0
}

// dropCaches empties the page cache so reads come from the disk.
func dropCaches(b *testing.B) {
	b.Helper()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
		b.Logf("cannot drop the page cache (%v): reads may come from memory", err)
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return rank.Percentile(s, 50)
}
