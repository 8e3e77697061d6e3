package listing

import (
	"strings"
	"unicode/utf8"
)

// Cut returns argv cut so that its JSON array, as encoding/json writes it
// (with or without HTML escaping), takes at most limit bytes: its first
// arguments whole, then the longest prefix of the next one (whole
// characters) that fits, if any does. It reports whether anything was cut;
// an argv that fits is returned as it is.
func Cut(argv []string, limit int) ([]string, bool) {
	used := 2 // [ and ]
	for i, a := range argv {
		if i > 0 {
			used++ // ,
		}
		used += 2 // the argument's quotes
		n, width, all := fit(a, limit-used)
		if !all {
			out := argv[:i:i]
			if n > 0 {
				out = append(out, a[:n])
			}
			return out, true
		}
		used += width
	}
	return argv, false
}

// fit is how many bytes of s encode within room bytes (whole characters
// only), their encoded width, and whether that is all of s.
func fit(s string, room int) (n, width int, all bool) {
	if room < 0 {
		return 0, 0, false
	}
	for n < len(s) {
		r, size := utf8.DecodeRuneInString(s[n:])
		w := encodedLen(r, size)
		if width+w > room {
			return n, width, false
		}
		width += w
		n += size
	}
	return n, width, true
}

// encodedLen bounds what encoding/json writes for the character r of a
// string, decoded from size bytes (see encodeState.string in
// encoding/json/encode.go): \" and \\; \n and the like or \u00XX for
// control characters; \u003c, \u003e, \u0026 for <, > and & under HTML
// escaping; \u2028, \u2029; \ufffd for each byte of invalid UTF-8.
func encodedLen(r rune, size int) int {
	switch {
	case r == utf8.RuneError && size == 1:
		return 6
	case r == '"' || r == '\\':
		return 2
	case r < 0x20, r == '<', r == '>', r == '&', r == '\u2028', r == '\u2029':
		return 6
	}
	return size
}

// Keep is Cut, with what it keeps copied: for a command held long after
// the call that brought it (a record), whose cut argument would otherwise
// keep the whole string alive.
func Keep(argv []string, limit int) ([]string, bool) {
	cut, truncated := Cut(argv, limit)
	if !truncated {
		return argv, false
	}
	kept := make([]string, len(cut))
	for i, a := range cut {
		kept[i] = strings.Clone(a)
	}
	return kept, true
}
