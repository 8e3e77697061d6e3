package daemon

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os/user"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// The listing tests (issue 20): a listing reply costs a few KiB per
// record, whatever the commands kept, and the whole records stay
// available one name at a time.
const (
	listGroup = "gslist"
	listAlice = "gslist-a"
)

// listRecordBytes bounds one record of a listing reply: its cut command
// and the rest of its fields (these tests' records, in /).
const listRecordBytes = api.ListCmdBytes + 2048

// longCommand is an argv of 240 KiB, just under the 256 KiB a command may
// have, told apart by i.
func longCommand(i int) []string {
	arg := strings.Repeat(string(rune('a'+i%26)), 120<<10)
	return []string{"/bin/true", arg, arg}
}

// reply sends one request and reads its response line, decoding its
// result into out (skipped when out is nil: the line is only counted, in
// the reader's own buffer); it returns the line's length.
func (rc *rawConn) reply(method string, params, out any) int {
	rc.t.Helper()
	b, err := json.Marshal(map[string]any{"method": method, "params": params})
	if err != nil {
		rc.t.Fatal(err)
	}
	rc.send(string(b))
	rc.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if out == nil {
		n := 0
		for {
			chunk, err := rc.r.ReadSlice('\n')
			n += len(chunk)
			if err == nil {
				return n
			}
			if !errors.Is(err, bufio.ErrBufferFull) {
				rc.t.Fatalf("%s: read: %v", method, err)
			}
		}
	}
	line, err := rc.r.ReadBytes('\n')
	if err != nil {
		rc.t.Fatalf("%s: read: %v", method, err)
	}
	var l api.Line
	if err := json.Unmarshal(line, &l); err != nil || !l.OK {
		rc.t.Fatalf("%s: %.300s (%v)", method, line, err)
	}
	if err := json.Unmarshal(l.Result, out); err != nil {
		rc.t.Fatalf("%s result: %v", method, err)
	}
	return len(line)
}

// checkCut fails t unless cmd is a cut of full within api.ListCmdBytes.
func checkCut(t *testing.T, what string, cmd []string, truncated bool, full []string) {
	t.Helper()
	enc, _ := json.Marshal(cmd)
	last := len(cmd) - 1
	switch {
	case !truncated:
		t.Errorf("%s: cmd_truncated not set (cmd of %d bytes)", what, len(enc))
	case len(enc) > api.ListCmdBytes:
		t.Errorf("%s: cmd of %d bytes in a listing, over %d", what, len(enc), api.ListCmdBytes)
	case last < 0 || !slices.Equal(cmd[:last], full[:last]) || !strings.HasPrefix(full[last], cmd[last]):
		t.Errorf("%s: cmd %.60q is not the start of the command", what, cmd)
	}
}

// TestListingRepliesBounded: a user with many exited processes and
// finished jobs of 240 KiB commands gets ps, jobs, rm --exited and
// prune_jobs replies within a few KiB per record (root's ps of everyone
// too), each command cut with cmd_truncated set; status and job of one
// name still return the command whole; the daemon's allocations for such
// a ps are a fraction of one command per record.
func TestListingRepliesBounded(t *testing.T) {
	alice := testutil.NewUser(t, listAlice, listGroup)
	h := newQueueHarness(t, "2x24G", func(c *config.Config) { c.Group = listGroup })
	u, err := user.Lookup(listAlice)
	if err != nil {
		t.Fatal(err)
	}
	const procs, jobs = 40, 4
	full := map[string][]string{}
	for i := range procs {
		name := fmt.Sprintf("p%02d", i)
		full[name] = longCommand(i)
		h.mustCtl(alice, append([]string{"run", "--dir", "/", name, "--"}, full[name]...)...)
	}
	for i := range jobs {
		name := fmt.Sprintf("job%d", i)
		full[name] = longCommand(procs + i)
		h.mustCtl(alice, append([]string{"submit", "--name", name, "--dir", "/", "--"}, full[name]...)...)
	}
	for name := range full {
		if strings.HasPrefix(name, "job") {
			h.waitJob(name)
		} else {
			h.waitExit(name)
		}
	}
	rc := h.rawAs(u, itoa(int(alice.GroupGID))) // reads need no live peer
	exited := api.PSParams{States: []api.State{api.StateExited}}
	records := procs + jobs // each job's attempt is an exited process too

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	size := rc.reply(api.MethodPS, exited, nil)
	runtime.ReadMemStats(&after)
	if max := records * listRecordBytes; size > max {
		t.Errorf("alice's ps of %d exited processes: a reply of %d bytes, over %d", records, size, max)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
		t.Errorf("alice's ps of %d processes of 240 KiB commands: %d MiB allocated, over 4 MiB", records, alloc>>20)
	}

	var ps api.PSResult
	rc.reply(api.MethodPS, exited, &ps)
	if len(ps.Processes) != records {
		t.Fatalf("alice's ps: %d processes, want %d", len(ps.Processes), records)
	}
	for _, p := range ps.Processes {
		checkCut(t, "ps "+p.Name, p.Cmd, p.CmdTruncated, full[p.Name])
	}
	root, err := h.client().PS(ctxT(t), exited)
	if err != nil || len(root) != records {
		t.Fatalf("root's ps: %d processes (%v), want %d", len(root), err, records)
	}
	for _, p := range root {
		checkCut(t, "root's ps "+p.Name, p.Cmd, p.CmdTruncated, full[p.Name])
	}

	if out := h.mustCtl(alice, "ps", "--state", "exited"); strings.Count(out, "…\n") != records {
		t.Errorf("alice's gpuschedctl ps: %d commands end in …, want %d", strings.Count(out, "…\n"), records)
	}
	var whole api.PSResult
	if err := json.Unmarshal([]byte(h.mustCtl(alice, "--json", "ps", "--state", "exited", "--no-trunc")), &whole); err != nil || len(whole.Processes) != records {
		t.Fatalf("alice's gpuschedctl ps --no-trunc: %d processes (%v), want %d", len(whole.Processes), err, records)
	}
	for _, p := range whole.Processes {
		if !slices.Equal(p.Cmd, full[p.Name]) || p.CmdTruncated {
			t.Errorf("gpuschedctl ps --no-trunc: %s's command not whole", p.Name)
		}
	}

	var one api.Process
	rc.reply(api.MethodStatus, api.StatusParams{Name: "p07"}, &one)
	if !slices.Equal(one.Cmd, full["p07"]) || one.CmdTruncated {
		t.Errorf("status p07: cmd of %d arguments (truncated %v), want the whole command", len(one.Cmd), one.CmdTruncated)
	}
	var job api.Job
	rc.reply(api.MethodJob, api.JobParams{Name: "job1"}, &job)
	if !slices.Equal(job.Cmd, full["job1"]) || job.CmdTruncated {
		t.Errorf("job job1: cmd of %d arguments (truncated %v), want the whole command", len(job.Cmd), job.CmdTruncated)
	}

	var js api.JobsResult
	if size := rc.reply(api.MethodJobs, api.JobsParams{All: true}, &js); size > jobs*listRecordBytes || len(js.Jobs) != jobs {
		t.Errorf("alice's jobs: %d jobs in %d bytes; want %d within %d", len(js.Jobs), size, jobs, jobs*listRecordBytes)
	}
	for _, j := range js.Jobs {
		checkCut(t, "jobs "+j.Name, j.Cmd, j.CmdTruncated, full[j.Name])
	}
	var rm api.RmResult
	if size := rc.reply(api.MethodRm, api.RmParams{Exited: true}, &rm); size > records*listRecordBytes || len(rm.Removed) != records {
		t.Errorf("alice's rm --exited: %d removed in %d bytes; want %d within %d", len(rm.Removed), size, records, records*listRecordBytes)
	}
	for _, p := range rm.Removed {
		checkCut(t, "rm "+p.Name, p.Cmd, p.CmdTruncated, full[p.Name])
	}
	var pruned api.JobsResult
	if size := rc.reply(api.MethodPruneJobs, api.PruneJobsParams{}, &pruned); size > jobs*listRecordBytes || len(pruned.Jobs) != jobs {
		t.Errorf("alice's prune_jobs: %d jobs in %d bytes; want %d within %d", len(pruned.Jobs), size, jobs, jobs*listRecordBytes)
	}
	for _, j := range pruned.Jobs {
		checkCut(t, "prune_jobs "+j.Name, j.Cmd, j.CmdTruncated, full[j.Name])
	}
}

// BenchmarkListingPS: a user's ps of 500 exited processes (the default
// --keep-finished) of 240 KiB commands, read by the user: the reply's
// bytes and what the daemon allocated per ps (the reply is counted in the
// reader's own buffer, which allocates nothing), besides the time.
func BenchmarkListingPS(b *testing.B) {
	alice := testutil.NewUser(b, listAlice, listGroup)
	h := newHarness(b, func(c *config.Config) { c.Group = listGroup })
	const procs = 500
	c := h.client()
	for i := range procs {
		name := fmt.Sprintf("p%03d", i)
		if _, err := c.Run(ctxT(b), api.RunParams{Name: name, Cmd: longCommand(i), Dir: "/", User: listAlice}); err != nil {
			b.Fatalf("run %s: %v", name, err)
		}
	}
	for i := range procs {
		h.waitExit(fmt.Sprintf("p%03d", i))
	}
	u, err := user.Lookup(listAlice)
	if err != nil {
		b.Fatal(err)
	}
	rc := h.rawAs(u, itoa(int(alice.GroupGID)))
	exited := api.PSParams{States: []api.State{api.StateExited}}
	var before, after runtime.MemStats
	size := 0
	runtime.ReadMemStats(&before)
	for b.Loop() {
		size = rc.reply(api.MethodPS, exited, nil)
	}
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(size), "reply-bytes")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N), "daemon-B/op")
}
