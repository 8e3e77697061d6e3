package daemon

import (
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

// TestPeekHead: the head is read only where the id and the method come
// first, with an id within api.MaxIDBytes; any other line is left to the
// full decode.
func TestPeekHead(t *testing.T) {
	for _, c := range []struct {
		line   string
		id     string
		method string
		ok     bool
	}{
		{`{"id":7,"method":"run","params":{"cmd":["true","xx`, "7", "run", true},
		{`{"method":"submit","id":"a","params":`, `"a"`, "submit", true},
		{`{"id":7,"params":{},"method":"run"}`, "", "", false},
		{`{"method":"run","params":{}}`, "", "", false},
		{`{"id":1,"id":2,"method":"run"}`, "", "", false},
		{`{"ID":1,"method":"run"}`, "", "", false},
		{`{"id":1,"method":7}`, "", "", false},
		{`["id",1,"method","run"]`, "", "", false},
		{`{"id":1,"method":"ru`, "", "", false},
		{`{"id":"` + strings.Repeat("i", api.MaxIDBytes-2) + `","method":"run"}`, `"` + strings.Repeat("i", api.MaxIDBytes-2) + `"`, "run", true},
		{`{"id":"` + strings.Repeat("i", api.MaxIDBytes-1) + `","method":"run"}`, "", "", false},
	} {
		id, method, ok := peekHead([]byte(c.line))
		if ok != c.ok || (ok && (string(id) != c.id || method != c.method)) {
			t.Errorf("peekHead(%s) = %s, %q, %v; want %s, %q, %v", c.line, id, method, ok, c.id, c.method, c.ok)
		}
	}
}
