package checkpointtest

import (
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
)

func TestReadWriteFaults(t *testing.T) {
	dir := t.TempDir()
	if f, err := ReadFaults(dir); err != nil || len(f) != 0 {
		t.Fatalf("ReadFaults without a file = %v, %v; want none", f, err)
	}
	want := Faults{"lock": {DelayMS: 5, Error: "CUDA_ERROR_UNKNOWN", Times: 1, PIDs: []int{3}, Leave: "failed"},
		"help": {NoDeviceMap: true}}
	if err := WriteFaults(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFaults(dir)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ReadFaults = %+v, %v; want %+v", got, err, want)
	}
	if err := os.WriteFile(filepath.Join(dir, FaultsFile), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFaults(dir); err == nil {
		t.Error("ReadFaults accepted bad JSON")
	}
}

func TestTakeCountsAcrossCalls(t *testing.T) {
	dir := t.TempDir()
	f := Fault{Error: "CUDA_ERROR_UNKNOWN", Times: 5, PIDs: []int{10}}
	if take, err := f.Take(dir, "lock", 11); take || err != nil {
		t.Errorf("Take for another pid = %v, %v", take, err)
	}
	var mu sync.Mutex
	taken := 0
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			take, err := f.Take(dir, "lock", 10)
			if err != nil {
				t.Error(err)
			}
			if take {
				mu.Lock()
				taken++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if taken != 5 {
		t.Errorf("%d calls took the fault, want 5", taken)
	}
	// Rewriting the faults resets the counts.
	if err := WriteFaults(dir, Faults{"lock": f}); err != nil {
		t.Fatal(err)
	}
	if take, err := f.Take(dir, "lock", 10); !take || err != nil {
		t.Errorf("Take after WriteFaults = %v, %v", take, err)
	}
	if take, _ := (Fault{}).Take(dir, "unlock", 1); !take {
		t.Error("a fault without times or pids did not apply")
	}
}
