package memfill

import (
	"bufio"
	"encoding/json"
	"net"
	"strings"
	"testing"
)

func TestHandle(t *testing.T) {
	h := &helper{hold: newHolder(newFake(8192, 256), 256, discard)}
	h.hold.set(params{targetMiB: 4096, reserveMiB: 512})
	tests := []struct {
		line    string
		id      uint64
		err     string // substring; "" wants a state
		release bool
	}{
		{`not json`, 0, "bad request", false},
		{`{"id":3,"op":"frobnicate"}`, 3, `unknown op "frobnicate"`, false},
		{`{"id":4}`, 4, `unknown op ""`, false},
		{`{"id":5,"op":"set"}`, 5, "set needs target_mib", false},
		{`{"id":6,"op":"set","target_mib":1024,"typo":1}`, 6, "unknown field", false},
		{`{"id":7,"op":"set","target_mib":"many"}`, 7, "bad request", false},
		{`{"id":8,"op":"set","target_mib":-1}`, 8, "bad request", false},
		{`{"id":9,"op":"status"}`, 9, "", false},
	}
	for _, tt := range tests {
		m, release := h.handle([]byte(tt.line))
		if m.ID != tt.id || release != tt.release {
			t.Errorf("%s: reply %+v release %v, want id %d release %v", tt.line, m, release, tt.id, tt.release)
		}
		if tt.err == "" {
			if m.Error != "" || m.State == nil {
				t.Errorf("%s: reply %+v, want a state", tt.line, m)
			}
		} else if !strings.Contains(m.Error, tt.err) || m.State != nil {
			t.Errorf("%s: reply %+v, want an error with %q", tt.line, m, tt.err)
		}
	}
	// Bad lines changed nothing.
	if st := h.hold.status(); st.TargetMiB != 4096 || st.ReserveMiB != 512 || st.HeldMiB != 3584 {
		t.Fatalf("state after bad requests: %+v", st)
	}
	m, _ := h.handle([]byte(`{"id":10,"op":"set","target_mib":8192}`))
	if m.State == nil || m.State.HeldMiB != 8192 || m.State.ReserveMiB != 0 {
		t.Fatalf("set without reserve: %+v", m)
	}
	m, release := h.handle([]byte(`{"id":11,"op":"release"}`))
	if !release || m.State == nil || m.State.HeldMiB != 0 {
		t.Fatalf("release: %+v %v", m, release)
	}
}

// TestMessageWire pins the wire form of the helper's lines.
func TestMessageWire(t *testing.T) {
	for _, tt := range []struct {
		m    message
		want string
	}{
		{message{ID: 2, State: &State{HeldMiB: 256, FreeMiB: 1, TotalMiB: 2, TargetMiB: 3, ReserveMiB: 4, Seq: 5}},
			`{"id":2,"state":{"held_mib":256,"free_mib":1,"total_mib":2,"target_mib":3,"reserve_mib":4,"error":"","seq":5}}`},
		{message{Hello: &hello{PID: 7, Start: 8, Backend: "sim", UUID: "GPU-x", ChunkMiB: 256}, State: &State{}},
			`{"hello":{"pid":7,"start":8,"backend":"sim","uuid":"GPU-x","chunk_mib":256},"state":{"held_mib":0,"free_mib":0,"total_mib":0,"target_mib":0,"reserve_mib":0,"error":"","seq":0}}`},
		{message{ID: 3, Error: "bad request: x"}, `{"id":3,"error":"bad request: x"}`},
		{message{Error: "superseded by a new controller", Code: codeSuperseded}, `{"error":"superseded by a new controller","code":"superseded"}`},
	} {
		b, err := json.Marshal(tt.m)
		if err != nil || string(b) != tt.want {
			t.Errorf("got %s (%v), want %s", b, err, tt.want)
		}
	}
}

// TestProtocolOverSocket speaks raw lines to a helper process.
func TestProtocolOverSocket(t *testing.T) {
	r := newRig(t, "")
	f := r.start(t)
	if _, err := f.Set(ctx(t), 4096, 0); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", r.opts.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc := bufio.NewScanner(c)
	next := func() message {
		t.Helper()
		for sc.Scan() {
			var m message
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			if m.ID != 0 || m.Hello != nil {
				return m
			}
		}
		t.Fatalf("connection ended: %v", sc.Err())
		return message{}
	}
	if m := next(); m.Hello == nil || m.Hello.PID != f.PID() || m.State == nil || m.State.TargetMiB != 4096 {
		t.Fatalf("hello: %+v", m)
	}
	for _, tt := range []struct {
		line string
		id   uint64
		err  string
	}{
		{`{"id":1,"op":"set","target_mib":"x"}`, 1, "bad request"},
		{`{"id":2,"op":"grow"}`, 2, `unknown op "grow"`},
		{`{"id":3,"op":"status"}`, 3, ""},
	} {
		if _, err := c.Write([]byte(tt.line + "\n")); err != nil {
			t.Fatal(err)
		}
		m := next()
		if m.ID != tt.id || (tt.err == "") != (m.State != nil) || !strings.Contains(m.Error, tt.err) {
			t.Fatalf("%s: %+v", tt.line, m)
		}
		if m.State != nil && (m.State.TargetMiB != 4096 || m.State.HeldMiB != 16*256) {
			t.Fatalf("state after bad lines: %+v", m.State)
		}
	}
}
