package daemon

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/pkg/api"
)

// nameFields classifies, by JSON name, every string field of every params
// type: true for a name of something (a process, job, snapshot, lease or
// user), false for other strings. A new string field fails
// TestAbuseBadNames until it is classified here.
var nameFields = map[string]bool{
	"name": true, "freeze": true, "thaw": true, "id": true, "user": true,
	"dir": false, "signal": false, "state": false,
}

// filterNames are name fields that only filter a list: a bad value
// matches nothing, so the answer is an empty list. lookupOnly are keys of
// in-memory objects (no file is named after them): a bad one is simply
// not found.
var (
	filterNames = map[string]bool{"ps.user": true, "jobs.user": true, "prune_jobs.user": true}
	lookupOnly  = map[string]bool{"release.id": true}
)

// processRefs are the name fields that name an existing process or job, where
// USER/NAME is another user's (docs/protocol.md §3): "a/b" there is well
// formed and names no process (not_found), or, in a filter, matches
// nothing (an events stream of it never ends, so it is not sent).
var processRefs = map[string]bool{
	"status.name": true, "kill.name": true, "rm.name": true, "logs.name": true, "wait.name": true,
	"freeze.name": true, "thaw.name": true, "swap.freeze": true, "swap.thaw": true, "migrate.name": true,
	"activate.name": true, "hibernate.name": true, "fork.name": true, "set.name": true,
	"snapshots.name": true, "events.name": true, "job.name": true, "cancel.name": true, "job_wait.name": true,
}

// optionalNames are the name fields where "" is valid (no filter, the
// caller, or a default name).
var optionalNames = map[string]bool{
	"status.name": true, "events.name": true, "snapshots.name": true, "ps.user": true, "jobs.user": true,
	"run.user": true, "submit.user": true, "submit.name": true, "submit.jobs[].name": true, "submit.jobs[].user": true,
	"prune_jobs.user": true,
}

// stringFields lists the JSON paths of the string fields of t ("name",
// "jobs[].name"), following embedded structs and slices of structs.
func stringFields(t reflect.Type, prefix string) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			out = append(out, stringFields(f.Type, prefix)...)
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "" || tag == "-" {
			continue
		}
		switch ft := f.Type; {
		case ft.Kind() == reflect.String:
			out = append(out, prefix+tag)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct && ft.Elem().PkgPath() == t.PkgPath():
			out = append(out, stringFields(ft.Elem(), prefix+tag+"[].")...)
		}
	}
	return out
}

// abuseBase is a request for method that is valid apart from the field
// under test.
func abuseBase(method string) map[string]any {
	switch method {
	case api.MethodRun:
		return map[string]any{"name": "ok", "cmd": []string{"true"}, "dir": "/"}
	case api.MethodSubmit:
		return map[string]any{"name": "ok", "cmd": []string{"true"}, "dir": "/",
			"jobs": []map[string]any{{"name": "ok1", "cmd": []string{"true"}}}}
	case api.MethodSwap:
		return map[string]any{"freeze": "a", "thaw": "b"}
	case api.MethodMigrate:
		return map[string]any{"name": "a", "gpu": 1}
	case api.MethodFork:
		return map[string]any{"name": "a", "copies": 1}
	}
	return map[string]any{}
}

// setPath sets a "jobs[].name" style path in m.
func setPath(m map[string]any, path string, v string) {
	if head, rest, ok := strings.Cut(path, "[]."); ok {
		for _, e := range m[head].([]map[string]any) {
			e[rest] = v
		}
		return
	}
	m[path] = v
}

// treeListing lists every path under root, with its kind and size.
func treeListing(t *testing.T, root string) []string {
	var out []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			kind := "f"
			if d.IsDir() {
				kind = "d"
			}
			out = append(out, kind+" "+p)
			_ = fi
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// TestAbuseBadNames sends path traversal and other bad values in every
// name-like field of every method's params (found by reflection): each is
// refused with invalid_argument and a sentence, and nothing appears or
// disappears anywhere under the daemon's directories.
func TestAbuseBadNames(t *testing.T) {
	h := newCkptHarness(t, config.DriverSim, func(c *config.Config) { c.CRIU = "none" })
	h.run("keep", "sleep", "1000")
	bad := []string{"../x", "..", ".", "a/b", "/etc/passwd", "x\x00y", "", strings.Repeat("n", 300), "a\nb", "../../../../tmp/gs-abuse"}

	type target struct{ method, field string }
	var targets []target
	var unclassified []string
	for m, typ := range methodParams {
		for _, path := range stringFields(typ, "") {
			leaf := path[strings.LastIndex(path, ".")+1:]
			isName, known := nameFields[leaf]
			switch {
			case !known:
				unclassified = append(unclassified, m+"."+path)
			case isName:
				targets = append(targets, target{m, path})
			}
		}
	}
	if len(unclassified) > 0 {
		sort.Strings(unclassified)
		t.Fatalf("string params fields not classified in nameFields: %v", unclassified)
	}
	sort.Slice(targets, func(i, j int) bool {
		return targets[i].method+"."+targets[i].field < targets[j].method+"."+targets[j].field
	})
	if len(targets) < 20 {
		t.Fatalf("found only %d name fields: %v", len(targets), targets)
	}

	rc := h.raw()
	before, state := treeListing(t, h.dir), h.abuseState()
	for _, tg := range targets {
		for _, v := range bad {
			if v == "" && optionalNames[tg.method+"."+tg.field] {
				continue
			}
			t.Run(tg.method+"."+tg.field+"="+strings.ReplaceAll(string(truncate(v)), "/", "∕"), func(t *testing.T) {
				if v == "a/b" && tg.method+"."+tg.field == "events.name" {
					return // a filter matching nothing: a stream that never ends
				}
				params := abuseBase(tg.method)
				setPath(params, tg.field, v)
				resp := rc.call(tg.method, params)
				key := tg.method + "." + tg.field
				switch {
				case v == "a/b" && processRefs[key]:
					if resp["code"] == string(api.CodeNotFound) {
						return
					}
					if b, _ := json.Marshal(resp["result"]); resp["ok"] != true || !strings.Contains(string(b), ":[]") {
						t.Errorf("%s=%q: got %v, want not_found or an empty list", key, v, resp)
					}
					return
				case filterNames[key]:
					if b, _ := json.Marshal(resp["result"]); resp["ok"] != true || !strings.HasSuffix(string(b), ":[]}") {
						t.Errorf("%s=%q: got %v, want an empty list", key, v, resp)
					}
					return
				case lookupOnly[key] && resp["code"] == string(api.CodeNotFound):
					return
				}
				if resp["ok"] != false || resp["code"] != string(api.CodeInvalidArgument) {
					t.Errorf("%s %s=%q: got %v, want invalid_argument", tg.method, tg.field, v, resp)
				} else if msg, _ := resp["error"].(string); len(msg) < 10 {
					t.Errorf("%s %s=%q: message %q", tg.method, tg.field, v, msg)
				}
			})
		}
	}
	if after := treeListing(t, h.dir); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Fatalf("files changed:\nbefore %v\nafter  %v", before, after)
	}
	if _, err := os.Lstat("/tmp/gs-abuse"); err == nil {
		t.Fatal("/tmp/gs-abuse was created")
	}
	if after := h.abuseState(); after != state {
		t.Fatalf("daemon state changed:\n%s\n%s", state, after)
	}
}

func truncate(s string) []byte {
	b, _ := json.Marshal(s)
	if len(b) > 24 {
		b = append(b[:20], "..."...)
	}
	return b
}
