package cli

import (
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"
)

// What a user's process chose (its command's arguments, its directory,
// the text of its errors, its events) reaches another user's terminal
// through gpuschedctl, root's included: raw, its control characters would
// act there (rewrite the lines above, hide what follows, set the window's
// title or the clipboard; 2026-11-28: a user's `run` with such an
// argument rewrote root's `status` of it). Everything gpuschedctl prints
// goes out with them escaped, but the lines of `logs` (the process's
// output, as cat shows a file) where they are not another user's on
// root's terminal (linesOut).

// escaped says how r is shown: C0 and C1 controls, DEL and Unicode format
// characters (bidirectional overrides, zero-width ones) as escapes, and
// the rest as it is.
func escaped(r rune) (string, bool) {
	if e, ok := namedEscapes[r]; ok {
		return e, true
	}
	switch {
	case r < 0x20 || r == 0x7f:
		return fmt.Sprintf(`\x%02x`, r), true
	case r >= 0x80 && r <= 0x9f, unicode.Is(unicode.Cf, r):
		return fmt.Sprintf(`\u%04x`, r), true
	}
	return "", false
}

// namedEscapes are the controls shown by name, as bash's $'...' reads
// them.
var namedEscapes = map[rune]string{
	'\a': `\a`, '\b': `\b`, '\t': `\t`, '\n': `\n`, '\v': `\v`, '\f': `\f`, '\r': `\r`, 0x1b: `\e`,
}

// printable is s with every control and format character escaped, tab
// and newline included, and bytes that are not UTF-8 as \xNN.
func printable(s string) string { return escapedText(s, false) }

// printableLines is printable but for tab and newline, as safeWriter
// writes text.
func printableLines(s string) string { return escapedText(s, true) }

func escapedText(s string, lines bool) string {
	if clean(s, lines) {
		return s
	}
	var b strings.Builder
	writeEscaped(&b, s, lines)
	return b.String()
}

// clean says whether s has nothing to escape (keeping tab and newline
// when lines is set).
func clean(s string, lines bool) bool {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				return false
			}
		}
		if lines && (r == '\t' || r == '\n') {
			continue
		}
		if _, esc := escaped(r); esc {
			return false
		}
	}
	return true
}

// writeEscaped writes s to b escaped as printable does, keeping tab and
// newline when lines is set.
func writeEscaped(b *strings.Builder, s string, lines bool) {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				fmt.Fprintf(b, `\x%02x`, s[i])
				continue
			}
		}
		if e, esc := escaped(r); esc && !(lines && (r == '\t' || r == '\n')) {
			b.WriteString(e)
			continue
		}
		b.WriteRune(r)
	}
}

// safeWriter escapes what printable does but tab and newline, which lay
// out gpuschedctl's own lines. A character split between two writes shows
// as its bytes' escapes (gpuschedctl writes whole strings).
type safeWriter struct{ w io.Writer }

func (s safeWriter) Write(p []byte) (int, error) {
	if clean(string(p), true) {
		return s.w.Write(p)
	}
	if _, err := io.WriteString(s.w, printableLines(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// scrub escapes, as printable does, every string v points to: the
// dashboard's data, whose text it lays out itself.
func scrub(v any) {
	scrubValue(reflect.ValueOf(v))
}

func scrubValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			scrubValue(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				scrubValue(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return // bytes (raw JSON), not text
		}
		for i := range v.Len() {
			scrubValue(v.Index(i))
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			scrubValue(e)
			v.SetMapIndex(k, e)
		}
	case reflect.String:
		if v.CanSet() {
			v.SetString(printable(v.String()))
		}
	}
}
