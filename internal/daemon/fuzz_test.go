package daemon

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

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
	params := []any{&api.RunParams{}, &api.KillParams{}, &api.StatusParams{}, &api.PSParams{}, &api.LogsParams{},
		&api.WaitParams{}, &api.NameParams{}, &api.EventsParams{}}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReaderSize(bytes.NewReader(data), 64<<10)
		for {
			line, err := readLine(r)
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
			c := &call{method: req.Method, params: req.Params}
			for _, p := range params {
				_ = c.decode(p)
			}
		}
	})
}
