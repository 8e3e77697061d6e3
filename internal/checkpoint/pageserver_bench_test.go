package checkpoint

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// diskWriteBandwidth writes size bytes sequentially into a new file in dir
// and syncs it, as `dd bs=1M conv=fdatasync` does, and returns bytes/s.
func diskWriteBandwidth(tb testing.TB, dir string, size int) float64 {
	tb.Helper()
	block := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range block {
		block[i] = byte(rng.Uint32())
	}
	path := filepath.Join(dir, "dd.bin")
	defer os.Remove(path)
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
	return float64(size) / time.Since(start).Seconds()
}

// BenchmarkPageServerFirstDump sends a 1 GiB process's pages to a page
// server without a parent, as CRIU's dump would (from a client in this
// process), and compares the throughput, fsync included, with the disk's
// sequential write bandwidth measured the dd way in the same directory.
func BenchmarkPageServerFirstDump(b *testing.B) {
	const size = 1 << 30
	root := b.TempDir()
	src := make([]byte, 64<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	key := pagemapKey{id: 1}
	var dumpSecs, ddBps float64
	for i := range b.N {
		ddBps += diskWriteBandwidth(b, root, size)
		dir := psImagesDir(b, root, strconv.Itoa(i))
		start := time.Now()
		ps, err := StartPageServer(dir, "")
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
		dumpSecs += time.Since(start).Seconds()
		b.StopTimer()
		os.RemoveAll(dir)
		b.StartTimer()
	}
	dump := float64(b.N) * size / dumpSecs
	b.ReportMetric(dump/1e6, "dump-MB/s")
	b.ReportMetric(ddBps/float64(b.N)/1e6, "dd-MB/s")
	b.ReportMetric(dump/(ddBps/float64(b.N)), "dump/dd")
}
