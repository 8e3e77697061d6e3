package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// modelOf finds the "model" string of a JSON object body by a scan of
// its top level: the values of the other keys (a long chat history) are
// skipped byte by byte, never decoded, several times faster than
// encoding/json, which validates and walks the whole body twice. The body
// is checked only as far as finding the key needs: the model server
// parses it. The key matches exactly (escapes undone), as the servers'
// own parsers match it, not case-insensitively as encoding/json would. A
// body that is not an object, names "model" twice (parsers disagree on
// which counts) or gives it a value that is not a string is refused; one
// without the key gives "".
func modelOf(b []byte) (string, error) {
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return "", errors.New("not a JSON object")
	}
	i = skipSpace(b, i+1)
	model, found := "", false
	for i == len(b) || b[i] != '}' {
		if i == len(b) || b[i] != '"' {
			return "", fmt.Errorf("offset %d: want a key", i)
		}
		end, err := skipString(b, i)
		if err != nil {
			return "", err
		}
		isModel, err := keyIs(b[i:end], "model")
		if err != nil {
			return "", err
		}
		i = skipSpace(b, end)
		if i == len(b) || b[i] != ':' {
			return "", fmt.Errorf("offset %d: want ':'", i)
		}
		i = skipSpace(b, i+1)
		vend, err := skipValue(b, i)
		if err != nil {
			return "", err
		}
		if isModel {
			if found {
				return "", errors.New(`"model" is given twice`)
			}
			found = true
			if b[i] != '"' {
				return "", errors.New(`"model" is not a string`)
			}
			if err := json.Unmarshal(b[i:vend], &model); err != nil {
				return "", fmt.Errorf(`"model": %w`, err)
			}
		}
		i = skipSpace(b, vend)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
			if i < len(b) && b[i] == '}' {
				return "", fmt.Errorf("offset %d: want a key after ','", i)
			}
			continue
		}
		if i == len(b) || b[i] != '}' {
			return "", fmt.Errorf("offset %d: want ',' or '}'", i)
		}
	}
	if skipSpace(b, i+1) != len(b) {
		return "", fmt.Errorf("offset %d: data after the object", i+1)
	}
	return model, nil
}

// keyIs says whether the quoted key raw is name once unescaped.
func keyIs(raw []byte, name string) (bool, error) {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1:len(raw)-1]) == name, nil
	}
	var k string
	if err := json.Unmarshal(raw, &k); err != nil {
		return false, fmt.Errorf("key %.40s: %w", raw, err)
	}
	return k == name, nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the offset after the string that starts at b[i]: at
// the first quote after it that an even number of backslashes precedes.
func skipString(b []byte, i int) (int, error) {
	for j := i + 1; ; {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return 0, fmt.Errorf("offset %d: unterminated string", i)
		}
		j += k
		n := 0
		for b[j-1-n] == '\\' {
			n++
		}
		j++
		if n%2 == 0 {
			return j, nil
		}
	}
}

// skipValue returns the offset after the value that starts at b[i]:
// a string, an object or array (nesting counted, strings skipped, no
// recursion), or a literal (number, true, false, null) up to its end.
func skipValue(b []byte, i int) (int, error) {
	if i == len(b) {
		return 0, fmt.Errorf("offset %d: want a value", i)
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, err := skipString(b, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("offset %d: unterminated %c", i, b[i])
	}
	j := i
	for j < len(b) && !endsLiteral(b[j]) {
		j++
	}
	if j == i {
		return 0, fmt.Errorf("offset %d: want a value", i)
	}
	return j, nil
}

func endsLiteral(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\r', '\n':
		return true
	}
	return false
}
