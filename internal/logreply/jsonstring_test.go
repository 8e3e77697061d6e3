package logreply

import (
	"bytes"
	"encoding/json"
	"testing"
)

// jsonOf is v as the daemon's line writer encodes it.
func jsonOf(t *testing.T, v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// FuzzAppendString: appendString writes any bytes as encoding/json
// writes them as a string, and escaping two pieces one after the other,
// the second starting with ASCII, writes their concatenation.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", `"quoted" \ back`, "tab\tnul\x00\x1f\x7f", "bad \xff utf-8 \xe2\x80", "sep \u2028\u2029", "<a href='x'>&</a>", "ünïcödé 😀", "\b\f\n\r"} {
		f.Add([]byte(s), []byte(" [cut]"))
	}
	f.Fuzz(func(t *testing.T, s, tail []byte) {
		if got, want := appendString(nil, s), jsonOf(t, string(s)); !bytes.Equal(got, want) {
			t.Fatalf("appendString(%q) = %s, encoding/json %s", s, got, want)
		}
		if len(tail) == 0 || tail[0] >= 0x80 {
			return
		}
		got := append(appendEscaped(appendEscaped([]byte{'"'}, s), tail), '"')
		if want := jsonOf(t, string(s)+string(tail)); !bytes.Equal(got, want) {
			t.Fatalf("%q then %q = %s, encoding/json of both %s", s, tail, got, want)
		}
	})
}

func TestAppendStringAllocatesOnlyItsResult(t *testing.T) {
	line := []byte("a line with \"quotes\", a tab\t, bad \xff and \u2028")
	dst := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() { dst = appendString(dst[:0], line) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}
