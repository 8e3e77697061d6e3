package memfill

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// read reads the hello, then states and replies until the connection
// ends; then it records why and closes done.
func (f *Filler) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	greeted := false
	for sc.Scan() {
		var m message
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue // the helper writes only JSON lines
		}
		if !greeted {
			if m.Hello == nil || m.State == nil {
				f.ready <- f.startError(m)
				greeted = true // the helper exits after its error line
				continue
			}
			f.hello = *m.Hello
			f.observe(*m.State)
			greeted = true
			f.ready <- nil
			continue
		}
		f.deliver(m)
	}
	err := f.ended()
	if !greeted {
		f.ready <- err
	}
	_ = f.conn.Close()
	f.mu.Lock()
	if !f.closing && f.pidfd != nil {
		f.pidfd.Close()
	}
	f.err, f.pending = err, nil
	f.mu.Unlock()
	close(f.done)
}

// startError is the error of a helper that answered with an error line
// instead of its hello (which its log repeats): ErrUnsupported when it
// found no backend.
func (f *Filler) startError(m message) error {
	if m.Error == "" {
		m.Error = "no hello"
	}
	err := fmt.Errorf("filler %s: helper: %s", f.o.UUID, m.Error)
	if m.Code == codeUnsupported {
		err = fmt.Errorf("%w: %w", err, ErrUnsupported)
	}
	return err
}

// deliver hands a reply to its call and records states.
func (f *Filler) deliver(m message) {
	if m.State != nil {
		f.observe(*m.State)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if m.ID == 0 {
		if m.Error != "" {
			f.reason = m.Error
		}
		return
	}
	if m.ID == f.releaseID.Load() && m.Error == "" {
		f.closing = true
	}
	if ch := f.pending[m.ID]; ch != nil {
		delete(f.pending, m.ID)
		ch <- m
	}
}

// observe records a state newer than the last and passes it to OnState.
func (f *Filler) observe(st State) {
	f.mu.Lock()
	newer := st.Seq > f.state.Seq
	if newer {
		f.state = st
	}
	f.mu.Unlock()
	if newer && f.o.OnState != nil {
		f.o.OnState(st)
	}
}

// ended returns why the connection ended: nil when the end was ours,
// else an ErrGone that says how the helper went.
func (f *Filler) ended() error {
	f.mu.Lock()
	closing, reason := f.closing, f.reason
	f.mu.Unlock()
	why := "connection closed"
	switch {
	case closing:
		return nil
	case reason != "":
		why = reason
	case f.exited != nil:
		select {
		case <-f.exited:
			why = "helper exited"
			if f.waitErr != nil {
				why = fmt.Sprintf("helper exited (%v)", f.waitErr)
			}
		case <-time.After(exitGrace):
		}
	}
	return fmt.Errorf("filler %s: %s%s: %w", f.o.UUID, why, f.logTail(), ErrGone)
}

// logTail quotes what the helper logged since it was reached, as
// "; log: ...", or "".
func (f *Filler) logTail() string {
	if f.o.LogPath == "" {
		return ""
	}
	s, err := readTail(f.o.LogPath, f.logOff, stderrTail)
	if err != nil || s == "" {
		return ""
	}
	return "; log: " + s
}
