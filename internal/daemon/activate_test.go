package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os/user"
	"strings"
	"sync"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// states maps each process the harness's root client sees to its state.
func (h *ckptHarness) states() map[string]api.State {
	h.t.Helper()
	ps, err := h.client().PS(ctxT(h.t), api.PSParams{})
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]api.State{}
	for _, p := range ps {
		out[p.Name] = p.State
	}
	return out
}

func (h *ckptHarness) wantStates(want map[string]api.State) {
	h.t.Helper()
	if got := h.states(); fmt.Sprint(got) != fmt.Sprint(want) {
		h.t.Fatalf("states %v, want %v", got, want)
	}
}

func (h *ckptHarness) freeze(name string) {
	h.t.Helper()
	if _, err := h.client().Freeze(ctxT(h.t), api.FreezeParams{Name: name}); err != nil {
		h.t.Fatal(err)
	}
}

func frozenNames(a *api.Activation) string {
	var names []string
	for _, f := range a.Frozen {
		names = append(names, f.Name)
	}
	return strings.Join(names, ",")
}

// TestActivateMakesRoomLeastRecentlyActiveFirst: on a 4 GiB GPU, a frozen
// 2500 MiB process needs two of three 1000 MiB ones gone; the two least
// recently activated are frozen, nothing on the other GPU is touched, and
// a running target is left as it is.
func TestActivateMakesRoomLeastRecentlyActiveFirst(t *testing.T) {
	h := newCkptHarness(t, config.DriverSim)
	cl := h.client()
	h.jobs("big", 0, 2500)
	h.freeze("big")
	for _, n := range []string{"a", "b", "c"} {
		h.jobs(n, 0, 1000)
	}
	h.jobs("elsewhere", 1, 1000)
	for _, n := range []string{"c", "a", "b"} {
		act, err := cl.Activate(ctxT(t), api.ActivateParams{Name: n})
		if err != nil {
			t.Fatal(err)
		}
		if act.Was != api.StateRunning || act.Thaw != nil || act.Frozen == nil || len(act.Frozen) != 0 || act.Held {
			t.Fatalf("activate running %s: %+v; want nothing done", n, act)
		}
	}
	act, err := cl.Activate(ctxT(t), api.ActivateParams{Name: "big"})
	if err != nil {
		t.Fatal(err)
	}
	if act.Was != api.StateFrozen || act.Thaw == nil || act.Thaw.Name != "big" || frozenNames(act) != "c,a" {
		t.Fatalf("activate big: %+v; want thawed, c and a frozen", act)
	}
	for _, step := range []string{"thaw", "freeze", "total"} {
		if _, ok := act.MS[step]; !ok {
			t.Fatalf("ms %v lacks %s", act.MS, step)
		}
	}
	h.wantStates(map[string]api.State{"a": api.StateFrozen, "b": api.StateRunning, "big": api.StateRunning, "c": api.StateFrozen, "elsewhere": api.StateRunning})

	// One process makes room in a single swap; big, just activated, is
	// the most recent, so b goes first now.
	act, err = cl.Activate(ctxT(t), api.ActivateParams{Name: "c", Evict: []string{"big"}})
	if err != nil {
		t.Fatal(err)
	}
	if frozenNames(act) != "big" {
		t.Fatalf("activate c evicting big: %+v", act)
	}
	if _, ok := act.MS["swap"]; !ok {
		t.Fatalf("ms %v: want a swap", act.MS)
	}
}

// TestActivateFromDisk: a hibernated process is restored from its snapshot.
func TestActivateFromDisk(t *testing.T) {
	h := newDiskHarness(t, config.DriverSim)
	h.memJob("m", 64, 4)
	if _, err := h.client().Hibernate(ctxT(t), api.HibernateParams{Name: "m"}); err != nil {
		t.Fatal(err)
	}
	act, err := h.client().Activate(ctxT(t), api.ActivateParams{Name: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if act.Was != api.StateHibernated || act.Thaw == nil || act.Thaw.Snapshot == "" || act.Thaw.State != api.StateRunning {
		t.Fatalf("activate hibernated: %+v", act)
	}
	h.wantStates(map[string]api.State{"m": api.StateRunning})
}

// TestActivateHoldAcrossConnections is the bug of the client-side
// activation: a process held on one connection is never frozen to make
// room for an activation on another, until that connection ends; holds
// count.
func TestActivateHoldAcrossConnections(t *testing.T) {
	h := newCkptHarness(t, config.DriverSim)
	h.jobs("reward", 0, 3000)
	h.freeze("reward")
	h.jobs("policy", 0, 3000)
	policy := h.proc("policy")

	holders := []*api.Client{h.client(), h.client()}
	for _, c := range holders {
		act, err := c.Hold(ctxT(t), api.ActivateParams{Name: "policy"})
		if err != nil {
			t.Fatal(err)
		}
		if !act.Held || act.Was != api.StateRunning {
			t.Fatalf("hold: %+v", act)
		}
	}
	if _, err := holders[0].PS(ctxT(t), api.PSParams{}); err == nil || !strings.Contains(err.Error(), `holds "policy"`) {
		t.Fatalf("a call on a held connection: %v; want a clear refusal", err)
	}
	other := h.client()
	_, err := other.Activate(ctxT(t), api.ActivateParams{Name: "reward"})
	wantCode(t, err, api.CodeResourceExhausted)
	if !strings.Contains(err.Error(), "nothing of its owner's on its GPUs may be frozen") {
		t.Fatalf("error %q", err)
	}
	_, err = other.Activate(ctxT(t), api.ActivateParams{Name: "reward", Evict: []string{"policy"}})
	wantCode(t, err, api.CodeResourceExhausted)
	h.wantStates(map[string]api.State{"policy": api.StateRunning, "reward": api.StateFrozen})

	holders[0].Close()
	holders[1].Close() // returns once the daemon has ended the hold
	if h.d.activator.Held(policy.ID) {
		t.Fatal("policy is still held after its holders' Close returned")
	}
	act, err := other.Activate(ctxT(t), api.ActivateParams{Name: "reward"})
	if err != nil {
		t.Fatal(err)
	}
	if frozenNames(act) != "policy" {
		t.Fatalf("after the holds ended: %+v", act)
	}
}

// TestActivateHoldCounts: a process stays held while any of its holds
// does; a hold ends when its client closes (at once, with a final line) or
// its connection just goes away.
func TestActivateHoldCounts(t *testing.T) {
	h := newCkptHarness(t, config.DriverSim)
	h.jobs("p", 0, 100)
	p := h.proc("p")
	a := h.client()
	if _, err := a.Hold(ctxT(t), api.ActivateParams{Name: "p"}); err != nil {
		t.Fatal(err)
	}
	raw := h.raw()
	raw.send(`{"id":1,"method":"activate","params":{"name":"p","hold":true}}`)
	if ev, _ := raw.recv()["event"].(map[string]any); ev["type"] != string(api.EventActivated) {
		t.Fatalf("held activation's first line: %v", ev)
	}
	a.Close()
	if !h.d.activator.Held(p.ID) {
		t.Fatal("one hold ended and p is no longer held")
	}
	raw.c.Close() // no half-close: the daemon notices the hang-up by itself
	waitFor(t, func() bool { return !h.d.activator.Held(p.ID) })

	// The owner's own freeze of a held process is its explicit act: allowed.
	if _, err := h.client().Hold(ctxT(t), api.ActivateParams{Name: "p"}); err != nil {
		t.Fatal(err)
	}
	h.freeze("p")
}

// TestActivateSameNameConcurrently: two activations of one frozen process
// at once thaw it once; the other finds it running.
func TestActivateSameNameConcurrently(t *testing.T) {
	h := newCkptHarness(t, config.DriverSim)
	h.jobs("m", 0, 1000)
	h.freeze("m")
	var wg sync.WaitGroup
	acts := make([]*api.Activation, 2)
	errs := make([]error, 2)
	for i := range acts {
		c := h.client()
		wg.Add(1)
		go func() {
			defer wg.Done()
			acts[i], errs[i] = c.Activate(context.Background(), api.ActivateParams{Name: "m"})
		}()
	}
	wg.Wait()
	thaws := 0
	for i := range acts {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if acts[i].Thaw != nil {
			thaws++
		} else if acts[i].Was != api.StateRunning {
			t.Fatalf("activation %d: %+v", i, acts[i])
		}
	}
	if thaws != 1 {
		t.Fatalf("%d thaws, want 1: %+v", thaws, acts)
	}
}

// TestActivateRollsBack: when the last thaw still does not fit, what was
// frozen is thawed back, newest first, and the error says so.
func TestActivateRollsBack(t *testing.T) {
	h := newCkptHarness(t, config.DriverSim)
	h.jobs("huge", 0, 3500)
	h.freeze("huge")
	for _, n := range []string{"a", "b", "c"} {
		h.jobs(n, 0, 1000)
	}
	before := h.states()
	_, err := h.client().Activate(ctxT(t), api.ActivateParams{Name: "huge", Evict: []string{"a", "b"}})
	wantCode(t, err, api.CodeResourceExhausted)
	if !strings.Contains(err.Error(), `activate "huge" failed after freezing a, b; thawed back what it froze`) {
		t.Fatalf("error %q", err)
	}
	h.wantStates(before)
	_, err = h.client().Activate(ctxT(t), api.ActivateParams{Name: "huge", Evict: []string{"a"}})
	wantCode(t, err, api.CodeResourceExhausted)
	if !strings.Contains(err.Error(), `"a" was thawed back`) {
		t.Fatalf("swap error %q", err)
	}
	h.wantStates(before)
}

// TestActivateBadInput: each refusal is clear and changes nothing.
func TestActivateBadInput(t *testing.T) {
	h := newCkptHarness(t, config.DriverSim)
	h.jobs("m", 0, 1000)
	h.freeze("m")
	h.jobs("r", 0, 1000)
	if _, err := h.client().Run(ctxT(t), api.RunParams{Name: "done", Dir: "/", Cmd: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	h.waitExit("done")
	nobody, _ := user.Lookup("nobody")
	if _, err := h.client().Run(ctxT(t), api.RunParams{Name: "theirs", Dir: "/", User: nobody.Username, Cmd: []string{"sleep", "1000"}}); err != nil {
		t.Fatal(err)
	}
	before := h.states()
	for _, c := range []struct {
		p    api.ActivateParams
		code api.Code
		msg  string
	}{
		{api.ActivateParams{}, api.CodeInvalidArgument, "activate: name is empty"},
		{api.ActivateParams{Name: "../x"}, api.CodeInvalidArgument, "activate:"},
		{api.ActivateParams{Name: "ghost"}, api.CodeNotFound, `process "ghost" not found`},
		{api.ActivateParams{Name: "m", Evict: []string{"ghost"}}, api.CodeNotFound, `process "ghost" not found`},
		{api.ActivateParams{Name: "m", Evict: []string{"m"}}, api.CodeInvalidArgument, "evict names the process being activated"},
		{api.ActivateParams{Name: "m", Evict: []string{"theirs"}}, api.CodeInvalidArgument, `evict names "theirs", which is not of the same owner`},
		{api.ActivateParams{Name: "m", Timeout: -1}, api.CodeInvalidArgument, "is negative"},
		{api.ActivateParams{Name: "done"}, api.CodeConflict, "it is exited"},
	} {
		_, err := h.client().Activate(ctxT(t), c.p)
		wantCode(t, err, c.code)
		if !strings.Contains(err.Error(), c.msg) {
			t.Fatalf("%+v: %q, want %q", c.p, err, c.msg)
		}
	}
	h.wantStates(before)
}

// TestActivateOtherUsers: real unprivileged users act only on their own:
// one cannot activate, hold or evict the other's process.
func TestActivateOtherUsers(t *testing.T) {
	u1 := testutil.NewUser(t, "gsact1", "gsact")
	u2 := testutil.NewUser(t, "gsact2", "gsact")
	h := newCkptHarness(t, config.DriverSim, func(c *config.Config) { c.Group = "gsact" })
	for _, r := range []struct {
		name, user string
		vram       int
	}{{"one-frozen", u1.Name, 3500}, {"two-frozen", u2.Name, 1000}, {"one", u1.Name, 1000}, {"two", u2.Name, 1000}} {
		_, err := h.client().Run(ctxT(t), api.RunParams{Name: r.name, Dir: "/", User: r.user, GPU: &api.GPURef{Index: 0},
			Cmd: []string{h.bins.SimJob, "--vram", fmt.Sprint(r.vram), "--tick", "0.02"}})
		if err != nil {
			t.Fatal(err)
		}
		h.followCount(r.name, "simjob: allocated", 1)
		if strings.HasSuffix(r.name, "-frozen") {
			h.freeze(r.name)
		}
	}
	before := h.states()
	one := h.rawAs(&user.User{Uid: fmt.Sprint(u1.UID), Gid: fmt.Sprint(u1.GID), Username: u1.Name}, fmt.Sprint(u1.GroupGID))
	for _, p := range []map[string]any{
		{"name": "gsact2/two-frozen"},
		{"name": "gsact2/two", "hold": true},
		{"name": "one-frozen", "evict": []string{"gsact2/two"}},
	} {
		resp := one.call(api.MethodActivate, p)
		if resp["code"] != string(api.CodePermissionDenied) || !strings.Contains(fmt.Sprint(resp["error"]), "belongs to gsact2") {
			t.Fatalf("%v: %v; want permission_denied", p, resp)
		}
	}
	// one's own activation may not freeze two's running process for room
	// on the GPU they share.
	resp := one.call(api.MethodActivate, map[string]any{"name": "one-frozen"})
	if resp["code"] != string(api.CodeResourceExhausted) {
		t.Fatalf("activate one-frozen: %v", resp)
	}
	h.wantStates(before)
}

// TestActivateCLI: gpuschedctl activate says what it did; with --hold it
// holds until its input ends, and the hold is gone once it has exited.
func TestActivateCLI(t *testing.T) {
	h := newCkptHarness(t, config.DriverSim)
	h.jobs("reward", 0, 3000)
	h.freeze("reward")
	h.jobs("policy", 0, 3000)
	policy := h.proc("policy")
	root := testutil.User{Name: "root"}

	out, errOut, code := h.ctlWith(root, []uint32{}, "", "activate", "reward")
	if code != 0 || !strings.HasPrefix(out, "activated reward (was frozen) in ") || !strings.Contains(out, ": froze policy to make room\n") {
		t.Fatalf("activate: exit %d, %q %q", code, out, errOut)
	}
	out, errOut, code = h.ctlWith(root, []uint32{}, "", "activate", "policy", "--hold", "--json")
	var act api.Activation
	if code != 0 || json.Unmarshal([]byte(out), &act) != nil || !act.Held || frozenNames(&act) != "reward" {
		t.Fatalf("activate --hold --json: exit %d, %q %q", code, out, errOut)
	}
	if h.d.activator.Held(policy.ID) {
		t.Fatal("policy is still held after gpuschedctl activate --hold exited")
	}
	_, errOut, code = h.ctlWith(root, []uint32{}, "", "activate", "reward", "--evict", "")
	if code == 0 || !strings.Contains(errOut, "--evict needs at least one process name") {
		t.Fatalf("activate --evict '': exit %d, %q", code, errOut)
	}
	h.wantStates(map[string]api.State{"policy": api.StateRunning, "reward": api.StateFrozen})
}
