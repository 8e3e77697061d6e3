package cli

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/gpusched/gpusched/pkg/api"
)

// lineErrors collects every problem of an input file, each as
// "FILE:LINE: message", so that one run reports them all.
type lineErrors struct {
	file  string
	lines []string
}

// add records a problem on line n.
func (e *lineErrors) add(n int, format string, args ...any) {
	e.lines = append(e.lines, fmt.Sprintf("%s:%d: %s", e.file, n, fmt.Sprintf(format, args...)))
}

// err is nil without problems, else one error listing them all under a
// heading that says nothing was submitted.
func (e *lineErrors) err() error {
	if len(e.lines) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s, nothing submitted:\n%s", e.file, api.Plural(len(e.lines), "problem", "problems"), strings.Join(e.lines, "\n"))
}

// checkText refuses what a command line or field may not hold: a NUL byte
// (no argv can carry it) or bytes that are not UTF-8 (JSON would alter them).
func checkText(s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("contains a NUL byte")
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("is not valid UTF-8")
	}
	return nil
}
