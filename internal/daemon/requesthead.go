package daemon

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/gpusched/gpusched/pkg/api"
)

// bigRequest is the size of request line past which a capped method's
// caller is checked against their cap on the line's head alone (peekHead),
// before the line is decoded whole: a user at --max-procs-per-user who
// floods runs of 250 KiB command lines otherwise cost the daemon the JSON
// validation of every one (a third of its CPU samples under the fairness
// benchmark's flood).
const bigRequest = 64 << 10

// peekHead reads the id and method of a request line that gives both
// before anything else, without reading further; ok is false for any other
// line, and for an id over api.MaxIDBytes: the full decode judges them. It only ever leads to an early
// refusal: what it reads is not trusted to admit anything.
func peekHead(line []byte) (id json.RawMessage, method string, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(line))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, "", false
	}
	var haveID, haveMethod bool
	for !(haveID && haveMethod) && dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, "", false
		}
		switch t {
		case "id":
			if haveID || dec.Decode(&id) != nil || len(id) > api.MaxIDBytes {
				return nil, "", false
			}
			haveID = true
		case "method":
			if haveMethod || dec.Decode(&method) != nil {
				return nil, "", false
			}
			haveMethod = true
		default:
			return nil, "", false
		}
	}
	return id, method, haveID && haveMethod
}

// refuseAtCap answers a big request (over bigRequest) whose method is
// capped and whose caller is at the cap, on the line's head alone; it
// reports whether it answered, and the answer's write error.
func (d *Daemon) refuseAtCap(ctx context.Context, w *lineWriter, a actor, line []byte) (bool, error) {
	if len(line) <= bigRequest {
		return false, nil
	}
	id, name, ok := peekHead(line)
	if !ok {
		return false, nil
	}
	name, m, ok := d.methodNamed(name)
	if !ok || m.admit == nil {
		return false, nil
	}
	err := m.admit(a)
	if err == nil {
		return false, nil
	}
	return true, d.answer(w, &call{ctx: ctx, actor: a, method: name}, id, nil, err)
}
