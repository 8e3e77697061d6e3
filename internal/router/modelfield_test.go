package router

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestModelOf(t *testing.T) {
	long := `{"messages":[` + strings.Repeat(`{"role":"user","content":"a \"quoted\" } ] { [ text"},`, 1000) + `{"role":"user","content":"hi"}],"model":"beta"}`
	for _, c := range []struct {
		body, want, err string
	}{
		{body: `{"model":"alpha"}`, want: "alpha"},
		{body: " \n{ \"stream\" : true , \"model\" : \"a\\u006cpha\" , \"n\":[1,{\"model\":\"x\"}]}\n", want: "alpha"},
		{body: `{"mod\u0065l":"alpha"}`, want: "alpha"},
		{body: `{"messages":[],"max_tokens":2}`, want: ""},
		{body: `{}`, want: ""},
		{body: long, want: "beta"},
		{body: `{"Model":"alpha"}`, want: ""}, // keys match exactly
		{body: `{"model":"alpha","model":"beta"}`, err: "twice"},
		{body: `{"model":7}`, err: "not a string"},
		{body: `{"model":null}`, err: "not a string"},
		{body: `[{"model":"alpha"}]`, err: "not a JSON object"},
		{body: ``, err: "not a JSON object"},
		{body: `{"model":"alpha"`, err: "want ',' or '}'"},
		{body: `{"model":"alpha",}`, err: "want a key"},
		{body: `{"model":"alpha"} {}`, err: "data after"},
		{body: `{"a":}`, err: "want a value"},
		{body: `{"a":[1,{"b":2}`, err: "unterminated"},
		{body: `{"model":"alp`, err: "unterminated string"},
		{body: `{model:"alpha"}`, err: "want a key"},
	} {
		got, err := modelOf([]byte(c.body))
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("modelOf(%.60q) = %q, %v; want %q", c.body, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("modelOf(%.60q) = %q, %v; want an error with %q", c.body, got, err, c.err)
		}
	}
}

// FuzzModelOf: never a panic; on a valid JSON object, the model
// encoding/json finds under the exact key, or an error only for a
// "model" given twice or not as a string.
func FuzzModelOf(f *testing.F) {
	for _, s := range []string{`{"model":"alpha"}`, `{"a":[{"b":"}"}],"model":"x\"y"}`, `{"model":1}`, `{"model":"a","model":"b"}`, `[]`, `{"a":"\\"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := modelOf(b)
		if !json.Valid(b) {
			return
		}
		raws := modelValues(b)
		if raws == nil {
			return // not an object
		}
		var want string
		switch {
		case len(raws) > 1, len(raws) == 1 && (string(raws[0]) == "null" || json.Unmarshal(raws[0], &want) != nil):
			if err == nil {
				t.Fatalf("modelOf(%q) = %q, want an error (model %q)", b, got, raws)
			}
		case err != nil:
			t.Fatalf("modelOf(%q) = %v on a valid object", b, err)
		case got != want:
			t.Fatalf("modelOf(%q) = %q, encoding/json finds %q", b, got, want)
		}
	})
}

// modelValues returns the values of the valid JSON object b's top-level
// "model" keys (empty, not nil, when none); nil when b is not an object.
func modelValues(b []byte) []json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	out := []json.RawMessage{}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		if key == "model" {
			out = append(out, v)
		}
	}
	return out
}

// BenchmarkModelOf compares the scan with encoding/json on a 64-turn
// chat history of 16 KiB with "model" last, as openai-python orders it.
func BenchmarkModelOf(b *testing.B) {
	body := []byte(`{"messages":[` + strings.Repeat(`{"role":"user","content":"`+strings.Repeat("word ", 50)+`"},`, 63) +
		`{"role":"user","content":"hi"}],"max_tokens":2,"model":"alpha"}`)
	b.Run("scan", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for range b.N {
			if m, err := modelOf(body); err != nil || m != "alpha" {
				b.Fatal(m, err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for range b.N {
			var v struct {
				Model string `json:"model"`
			}
			if err := json.Unmarshal(body, &v); err != nil || v.Model != "alpha" {
				b.Fatal(v.Model, err)
			}
		}
	})
}
