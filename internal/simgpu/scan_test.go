package simgpu

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSnapshotPrunesGarbage(t *testing.T) {
	reg := newTestRegistry(t, 1, 1024)
	pid, st := self(t)
	if err := reg.Allocate(pid, st, DeviceUUID(0), 10); err != nil {
		t.Fatal(err)
	}
	procs := reg.userDir(0)
	other := strconv.Itoa(pid + 1)
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(procs, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("1.json", "{not json")
	write(other+".json", `{"pid":1,"start_time":1,"usage":{"`+DeviceUUID(0)+`":500}}`) // names another pid
	write("."+other+".json.tmp123", "{}")                                              // orphaned temp file
	write("notes.txt", "kept")
	if err := os.Symlink("/etc/passwd", filepath.Join(procs, "2.json")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(procs, "3.json"), 0o644); err != nil {
		t.Fatal(err)
	}

	snap := snapshot(t, reg) // must not block on the FIFO
	if snap.Devices[0].UsedMiB != 10 || len(snap.Procs) != 1 {
		t.Errorf("snapshot = %+v, want only our 10 MiB", snap)
	}
	ents, err := os.ReadDir(procs)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 2 || names[0] != strconv.Itoa(pid)+".json" || names[1] != "notes.txt" {
		t.Errorf("procs/ after pruning: %v", names)
	}
}
