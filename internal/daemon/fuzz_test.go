package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"sort"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

// methodParams is the params type each method decodes (struct{} for
// methods that take none). TestMethodParamsCovered keeps it complete, so
// that FuzzParams and TestAbuseBadNames cover every method.
var methodParams = map[string]reflect.Type{
	api.MethodHello:          reflect.TypeFor[struct{}](),
	api.MethodRun:            reflect.TypeFor[api.RunParams](),
	api.MethodKill:           reflect.TypeFor[api.KillParams](),
	api.MethodStatus:         reflect.TypeFor[api.StatusParams](),
	api.MethodPS:             reflect.TypeFor[api.PSParams](),
	api.MethodRm:             reflect.TypeFor[api.RmParams](),
	api.MethodGPUs:           reflect.TypeFor[struct{}](),
	api.MethodFreeze:         reflect.TypeFor[api.FreezeParams](),
	api.MethodThaw:           reflect.TypeFor[api.ThawParams](),
	api.MethodSwap:           reflect.TypeFor[api.SwapParams](),
	api.MethodActivate:       reflect.TypeFor[api.ActivateParams](),
	api.MethodMigrate:        reflect.TypeFor[api.MigrateParams](),
	api.MethodHibernate:      reflect.TypeFor[api.HibernateParams](),
	api.MethodFork:           reflect.TypeFor[api.ForkParams](),
	api.MethodSnapshots:      reflect.TypeFor[api.SnapshotsParams](),
	api.MethodDeleteSnapshot: reflect.TypeFor[api.DeleteSnapshotParams](),
	api.MethodSet:            reflect.TypeFor[api.SetParams](),
	api.MethodLogs:           reflect.TypeFor[api.LogsParams](),
	api.MethodWait:           reflect.TypeFor[api.WaitParams](),
	api.MethodEvents:         reflect.TypeFor[api.EventsParams](),
	api.MethodSubmit:         reflect.TypeFor[api.SubmitParams](),
	api.MethodJobs:           reflect.TypeFor[api.JobsParams](),
	api.MethodJob:            reflect.TypeFor[api.JobParams](),
	api.MethodCancel:         reflect.TypeFor[api.JobParams](),
	api.MethodJobWait:        reflect.TypeFor[api.JobWaitParams](),
	api.MethodAcquire:        reflect.TypeFor[api.AcquireParams](),
	api.MethodRelease:        reflect.TypeFor[api.ReleaseParams](),
	api.MethodLeases:         reflect.TypeFor[struct{}](),
	api.MethodFill:           reflect.TypeFor[api.FillParams](),
	api.MethodUnfill:         reflect.TypeFor[api.UnfillParams](),
	api.MethodFillers:        reflect.TypeFor[struct{}](),
	api.MethodPruneJobs:      reflect.TypeFor[api.PruneJobsParams](),
}

// TestMethodParamsCovered fails when the daemon has a method that
// methodParams does not list.
func TestMethodParamsCovered(t *testing.T) {
	d := &Daemon{}
	var missing []string
	for m := range d.methodTable() {
		if _, ok := methodParams[m]; !ok {
			missing = append(missing, m)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("methods missing from methodParams (add their params type): %v", missing)
	}
}

// FuzzReadRequest feeds arbitrary bytes through the request decoder as the
// server does (lines, envelope, method lookup, params of every method):
// it must never panic or hang, and never return a line over the limit.
func FuzzReadRequest(f *testing.F) {
	for _, s := range []string{
		`{"method":"status"}` + "\n",
		`{"id":1,"method":"run","params":{"name":"a","cmd":["x"],"gpu":0,"gpus":["GPU-1",2],"env":{"A":"b"},"nice":3}}` + "\n",
		`{"method":"kill","params":{"name":"a","grace":"1.5s"}}` + "\n" + `{"method":"kill","params":{"name":"a","grace":2}}`,
		`{"method":"logs","params":{"name":"a","lines":-1,"follow":true}}` + "\n\n\n",
		"{\"method\":\"wait\",\"params\":{\"timeout\":\"x\"}}\r\n",
		"\xff\xfe{]]",
	} {
		f.Add([]byte(s))
	}
	d := &Daemon{}
	d.methods = d.methodTable()
	f.Fuzz(func(t *testing.T, data []byte) {
		r := newLineReader(bytes.NewReader(data), nil)
		for {
			line, err := r.next()
			var tooLong *lineTooLong
			if errors.As(err, &tooLong) {
				continue
			}
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				t.Fatalf("readLine: %v", err)
			}
			if len(line) > api.MaxLineBytes {
				t.Fatalf("line of %d bytes passed the limit", len(line))
			}
			req, _, perr := d.parseRequest(line)
			if perr != nil {
				if perr.Code == "" || perr.Message == "" {
					t.Fatalf("error without code or message: %+v", perr)
				}
				continue
			}
			decodeParams(t, req.Method, req.Params)
		}
	})
}

// FuzzParams decodes arbitrary params as those of every method, through
// the daemon's own decode: it must never panic, and a failure must be an
// invalid_argument with a message. Nothing runs, so nothing changes.
func FuzzParams(f *testing.F) {
	for _, s := range []string{
		`{}`, `null`, ``, `[]`, `"x"`, `{"name":"a"}`, `{"name":"../x"}`, `{"name":"a\u0000b"}`,
		`{"name":"a","cmd":["x"],"dir":"/","gpu":0,"gpus":["GPU-1",2],"env":{"A":"b"},"nice":3,"ttl":"1h","filled":0.5}`,
		`{"name":"a","grace":"1.5s","signal":"KILL"}`, `{"name":"a","grace":1e400}`, `{"timeout":-1}`,
		`{"vram":"18G","gpus":2,"jobs":[{"cmd":["x"],"vram":"auto","mps_mem_limit":"1G"}]}`,
		`{"vram":0}`, `{"vram":"99999999999999999999T"}`, `{"min_free":"8G","gpu_ids":[0,"GPU-x"],"max_power":1e308}`,
		`{"gpu":"GPU-5a1d0000-0000-4000-8000-000000000000","ratio":0.5,"mib":"20G"}`,
		`{"priority":1,"pin":true,"ttl":null,"idle":"5m"}`, `{"freeze":"a","thaw":"b","timeout":"1s"}`,
		`{"id":"0b6d2d3c-8869-452c-9a4e-33a8305c71c3"}`, `{"lines":-1,"follow":true}`, `{"name":"a"} {}`,
		`{"name":"a","name":"b"}`, `{"NAME":"a"}`, `{"gpu":-1}`, `{"gpu":1.5}`, `{"gpus":[null]}`,
		`{"names":["a","../b"],"exited":true,"user":"x"}`, `{"states":["exited",null]}`, `{"states":[]}`,
	} {
		f.Add([]byte(s))
	}
	methods := make([]string, 0, len(methodParams))
	for m := range methodParams {
		methods = append(methods, m)
	}
	sort.Strings(methods)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, m := range methods {
			decodeParams(t, m, json.RawMessage(data))
		}
	})
}

// decodeParams decodes params as method's, failing t unless that
// succeeds or fails with invalid_argument and a message.
func decodeParams(t *testing.T, method string, params json.RawMessage) {
	t.Helper()
	typ, ok := methodParams[method]
	if !ok {
		t.Fatalf("method %q has no params type in methodParams", method)
	}
	c := &call{method: method, params: params}
	err := c.decode(reflect.New(typ).Interface())
	if err == nil {
		return
	}
	if code, msg := toWire(err); code != api.CodeInvalidArgument || msg == "" {
		t.Fatalf("%s params %q: %v (code %s), want invalid_argument", method, params, err, code)
	}
}
