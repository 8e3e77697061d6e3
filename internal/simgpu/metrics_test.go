package simgpu

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func ptr[T any](v T) *T { return &v }

// show renders metrics for comparison, "-" for unknown.
func show(m Metrics) string {
	f := func(p any) string {
		switch v := p.(type) {
		case *int:
			if v != nil {
				return fmt.Sprint(*v)
			}
		case *float64:
			if v != nil {
				return fmt.Sprint(*v)
			}
		}
		return "-"
	}
	return strings.Join([]string{f(m.UtilPercent), f(m.PowerWatts), f(m.PowerLimitWatts), f(m.TempC)}, " ")
}

// TestMetricsRoundTrip: what SetMetrics sets, Snapshot reports, through a
// second registry opened on the directory as another process would; a
// device never set, or cleared, reports nothing.
func TestMetricsRoundTrip(t *testing.T) {
	reg := newTestRegistry(t, 3, 1024)
	if _, err := os.Stat(filepath.Join(reg.Dir(), metricsName)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("metrics.json before any SetMetrics: %v", err)
	}
	for _, d := range snapshot(t, reg).Devices {
		if !d.Metrics.zero() {
			t.Errorf("GPU %d: metrics %s before any were set", d.Index, show(d.Metrics))
		}
	}
	hot := Metrics{UtilPercent: ptr(97), PowerWatts: ptr(612.5), PowerLimitWatts: ptr(700.0), TempC: ptr(91)}
	if err := reg.SetMetrics(DeviceUUID(0), hot); err != nil {
		t.Fatal(err)
	}
	if err := reg.SetMetrics(DeviceUUID(2), Metrics{TempC: ptr(40)}); err != nil {
		t.Fatal(err)
	}
	other, err := Open(reg.Dir())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"97 612.5 700 91", "- - - -", "- - - 40"}
	for i, d := range snapshot(t, other).Devices {
		if got := show(d.Metrics); got != want[i] {
			t.Errorf("GPU %d: metrics %s, want %s", i, got, want[i])
		}
	}

	// Setting replaces; zero clears.
	if err := other.SetMetrics(DeviceUUID(0), Metrics{UtilPercent: ptr(5)}); err != nil {
		t.Fatal(err)
	}
	if err := other.SetMetrics(DeviceUUID(2), Metrics{}); err != nil {
		t.Fatal(err)
	}
	want = []string{"5 - - -", "- - - -", "- - - -"}
	for i, d := range snapshot(t, reg).Devices {
		if got := show(d.Metrics); got != want[i] {
			t.Errorf("after replace: GPU %d: metrics %s, want %s", i, got, want[i])
		}
	}
	fi, err := os.Stat(filepath.Join(reg.Dir(), metricsName))
	if err != nil || fi.Mode() != 0o644 {
		t.Errorf("metrics.json: %v, %v; want mode 0644", fi, err)
	}
}

func TestSetMetricsRejects(t *testing.T) {
	reg := newTestRegistry(t, 1, 1024)
	for _, tt := range []struct {
		uuid string
		m    Metrics
		want string
	}{
		{DeviceUUID(7), Metrics{TempC: ptr(50)}, "no such simulated GPU"},
		{DeviceUUID(0), Metrics{UtilPercent: ptr(101)}, "utilization 101%: must be 0..100"},
		{DeviceUUID(0), Metrics{UtilPercent: ptr(-1)}, "utilization -1%"},
		{DeviceUUID(0), Metrics{PowerWatts: ptr(-3.0)}, "power -3 W"},
		{DeviceUUID(0), Metrics{PowerWatts: ptr(math.NaN())}, "power NaN W"},
		{DeviceUUID(0), Metrics{PowerLimitWatts: ptr(math.Inf(1))}, "power limit +Inf W"},
	} {
		err := reg.SetMetrics(tt.uuid, tt.m)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("SetMetrics(%s, %s) = %v, want %q", tt.uuid, show(tt.m), err, tt.want)
		}
	}
	if d := snapshot(t, reg).Devices[0]; !d.Metrics.zero() {
		t.Errorf("a rejected SetMetrics changed the metrics: %s", show(d.Metrics))
	}
}

// TestSetMetricsConcurrent: setters of different devices do not lose each
// other's values.
func TestSetMetricsConcurrent(t *testing.T) {
	const n = 8
	reg := newTestRegistry(t, n, 1024)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := reg.SetMetrics(DeviceUUID(i), Metrics{TempC: ptr(60 + i)}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i, d := range snapshot(t, reg).Devices {
		if d.Metrics.TempC == nil || *d.Metrics.TempC != 60+i {
			t.Errorf("GPU %d: temperature %s, want %d", i, show(d.Metrics), 60+i)
		}
	}
}

// TestSnapshotBadMetricsFile: a corrupt metrics.json fails the snapshot,
// naming the file, rather than silently reporting nothing.
func TestSnapshotBadMetricsFile(t *testing.T) {
	reg := newTestRegistry(t, 1, 1024)
	if err := os.WriteFile(filepath.Join(reg.Dir(), metricsName), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Snapshot(); err == nil || !strings.Contains(err.Error(), metricsName) {
		t.Errorf("Snapshot() = %v, want an error naming %s", err, metricsName)
	}
}
