package schedwait

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// excerpt is a trace as a tracefs instance writes it (record-tgid on,
// trace_clock mono; the header as on Linux 6.18): a gpuschedd thread (200
// of process 199) woken by a hostile thread (100, named with a space) onto
// the CPU that thread holds, run once that thread blocks, preempted and
// moved to a CPU that went idle, woken again while running (no wait); a
// second thread (201) woken onto an idle CPU; a third (203) woken onto an
// idle CPU whose switch to it is missing, as this VM's kernel (6.18)
// records none when its second CPU leaves idle; a fourth woken at the
// end, never run.
const excerpt = `# tracer: nop
#
# entries-in-buffer/entries-written: 14/21   #P:2
#
#           TASK-PID       TGID    CPU#  |||||  TIMESTAMP  FUNCTION
#              | |           |       |   |||||     |         |
          <idle>-0       (-------) [000] d..2. 1.000000: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=fair load next_pid=100 next_prio=120
          <idle>-0       (-------) [001] d..2. 1.000010: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=other next_pid=300 next_prio=120
  fair load-100     (    100) [000] d.h2. 1.000099: sched_waking: comm=gpuschedd pid=200 prio=120 target_cpu=000
  fair load-100     (    100) [000] d.h2. 1.000100: sched_wakeup: comm=gpuschedd pid=200 prio=120 target_cpu=000
  fair load-100     (    100) [000] d..2. 1.002900: sched_switch: prev_comm=fair load prev_pid=100 prev_prio=120 prev_state=D ==> next_comm=gpuschedd next_pid=200 next_prio=120
       gpuschedd-200     (    199) [000] d..2. 1.003000: sched_switch: prev_comm=gpuschedd prev_pid=200 prev_prio=120 prev_state=R+ ==> next_comm=fair load next_pid=100 next_prio=120
           other-300     (    300) [001] d..2. 1.003100: sched_switch: prev_comm=other prev_pid=300 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
          <idle>-0       (-------) [001] d..2. 1.003150: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=gpuschedd next_pid=200 next_prio=120
  fair load-100     (    100) [000] d.h2. 1.003200: sched_wakeup: comm=gpuschedd pid=200 prio=120 target_cpu=001
CPU:1 [LOST 7 EVENTS]
       gpuschedd-200     (    199) [001] d..2. 1.004000: sched_switch: prev_comm=gpuschedd prev_pid=200 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
  fair load-100     (    100) [000] d.h2. 1.004100: sched_wakeup: comm=gpuschedd pid=201 prio=120 target_cpu=001
          <idle>-0       (-------) [001] d..2. 1.004130: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=gpuschedd next_pid=201 next_prio=120
       gpuschedd-201     (    199) [001] d..2. 1.004200: sched_switch: prev_comm=gpuschedd prev_pid=201 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
  fair load-100     (    100) [000] d.h2. 1.004250: sched_wakeup: comm=gpuschedd pid=203 prio=120 target_cpu=001
          <idle>-0       (-------) [001] dNh4. 1.004260: sched_wakeup: comm=rcu_preempt pid=15 prio=120 target_cpu=001
       gpuschedd-203     (    199) [001] d..2. 1.004290: sched_switch: prev_comm=gpuschedd prev_pid=203 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
  fair load-100     (    100) [000] d.h2. 1.004300: sched_wakeup: comm=gpuschedd pid=202 prio=120 target_cpu=000
`

// at is a trace time in seconds as ns.
func at(s float64) int64 { return int64(math.Round(s * 1e9)) }

func TestParseFollowsTheWaits(t *testing.T) {
	tr, err := Parse(strings.NewReader(excerpt), func(c string) bool { return c == "gpuschedd" })
	if err != nil {
		t.Fatal(err)
	}
	want := []Wait{
		{Tid: 200, Woken: true, Waker: 100, From: at(1.000100), To: at(1.002900), Queued: 0, Ran: 0, Behind: 100, IdleCPUs: 0, Before: 100, BeforeBlocked: true},
		{Tid: 200, From: at(1.003000), To: at(1.003150), Queued: 0, Ran: 1, Behind: 100, IdleCPUs: 0},
		{Tid: 201, Woken: true, From: at(1.004100), To: at(1.004130), Queued: 1, Ran: 1, Behind: 0, IdleCPUs: 1},
		{Tid: 203, Woken: true, From: at(1.004250), To: at(1.004260), Queued: 1, Ran: 1, Behind: 0, IdleCPUs: 1, Unrecorded: true},
	}
	if !reflect.DeepEqual(tr.Waits, want) {
		t.Fatalf("waits\n got %+v\nwant %+v", tr.Waits, want)
	}
	if tr.Tgid[200] != 199 || tr.Tgid[201] != 199 || tr.Tgid[100] != 100 {
		t.Errorf("processes: %v", tr.Tgid)
	}
	if tr.Comm[100] != "fair load" {
		t.Errorf("thread 100 named %q, want %q", tr.Comm[100], "fair load")
	}
	if tr.Events != strings.Count(excerpt, ": sched_") {
		t.Errorf("%d events read, want %d", tr.Events, strings.Count(excerpt, ": sched_"))
	}
	if tr.CPUs != 2 || tr.Lost != 7 || tr.Start != at(1.0) || tr.End != at(1.004300) {
		t.Errorf("CPUs %d, lost %d, from %d to %d", tr.CPUs, tr.Lost, tr.Start, tr.End)
	}
}

func TestSummarizeSaysWhatTheLongWaitsWereBehind(t *testing.T) {
	tr, err := Parse(strings.NewReader(excerpt), func(c string) bool { return c == "gpuschedd" })
	if err != nil {
		t.Fatal(err)
	}
	roles := map[int]string{100: "hostile"}
	s := tr.Summarize(199, 100*time.Microsecond, func(tid int) string { return tr.Name(tid, roles) })
	want := Summary{Waits: 4, Woken: 3, Unrecorded: 1, P50: 30 * time.Microsecond, P99: 2800 * time.Microsecond, Max: 2800 * time.Microsecond,
		Total: 2990 * time.Microsecond, Long: 2, LongTotal: 2950 * time.Microsecond, LongPreempted: 1, LongMoved: 1, LongUntilBlocked: 1,
		Behind: map[string]int{"hostile": 2}}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("summary\n got %+v\nwant %+v", s, want)
	}
	if got := tr.Waiting(at(1.0), at(1.003100), tr.Of(199)); got != 2900*time.Microsecond {
		t.Errorf("waiting in the first 3.1 ms: %v, want 2.9ms", got)
	}
	if got := tr.Waiting(at(1.0), at(1.005), tr.WokenBy(199, 100)); got != 2800*time.Microsecond {
		t.Errorf("woken by the hostile and waiting: %v, want 2.8ms", got)
	}
	if got := tr.Name(300, roles); got != "other" {
		t.Errorf("thread 300 is %q", got)
	}
	if got := tr.Name(0, roles); got != "idle" {
		t.Errorf("thread 0 is %q", got)
	}
}

func TestParseRefusesWhatIsNoTrace(t *testing.T) {
	if _, err := Parse(strings.NewReader("# tracer: nop\n"), func(string) bool { return true }); err == nil {
		t.Error("a trace without events parsed")
	}
	broken := "  x-1 (1) [000] d..2. 1.0: sched_switch: prev_comm=x prev_pid=1\n"
	if _, err := Parse(strings.NewReader(broken), func(string) bool { return true }); err == nil {
		t.Error("a cut sched_switch line parsed")
	}
}
