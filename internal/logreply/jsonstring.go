package logreply

import "unicode/utf8"

// appendString appends s to dst as encoding/json encodes a string with
// HTML escaping off (the line writer's setting), byte for byte: quotes,
// backslashes and control bytes escaped, each invalid UTF-8 byte as
// \ufffd, U+2028 and U+2029 escaped (encoding/json's appendString, Go
// 1.26). A logs reply encodes its lines from the log's bytes with it,
// without a string for each.
func appendString[S []byte | string](dst []byte, s S) []byte {
	return append(appendEscaped(append(dst, '"'), s), '"')
}

// appendEscaped appends what appendString puts between the quotes.
// Escaping goes byte by byte and rune by rune, so two pieces escaped one
// after the other are the whole escaped, provided the second does not
// continue a rune the first left unfinished (it starts with ASCII).
func appendEscaped[S []byte | string](dst []byte, s S) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(string(s[i:min(len(s), i+utf8.UTFMax)]))
		switch {
		case c == utf8.RuneError && size == 1:
			dst = append(append(dst, s[start:i]...), `\ufffd`...)
		case c == '\u2028' || c == '\u2029':
			dst = append(append(dst, s[start:i]...), '\\', 'u', '2', '0', '2', hex[c&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(dst, s[start:]...)
}
