// Package tomlline finds the line of a TOML value while decoding it, for
// errors that name the file, line and key (the daemon's config file and
// the router's).
package tomlline

import (
	"errors"

	"github.com/BurntSushi/toml"
)

// ValueAt runs fn on the value p and returns p's line with fn's error. The
// TOML library knows a key's line only while it decodes it, so fn runs as
// the value's unmarshaler.
func ValueAt(md *toml.MetaData, p toml.Primitive, fn func(any) error) (int, error) {
	var ferr error
	err := md.PrimitiveDecode(p, &unmarshaler{func(v any) error {
		ferr = fn(v)
		return errLine // every key: the wrapping ParseError carries its line
	}})
	line := 0
	if pe := (toml.ParseError{}); errors.As(err, &pe) {
		line = pe.Position.Line
	}
	return line, ferr
}

var errLine = errors.New("line")

type unmarshaler struct{ fn func(any) error }

func (u *unmarshaler) UnmarshalTOML(v any) error { return u.fn(v) }
