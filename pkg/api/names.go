package api

import "fmt"

// MaxNameLen bounds process names.
const MaxNameLen = 64

// ValidateName checks a process name: 1-64 of [A-Za-z0-9._-], not "." or
// "..", so a name is always safe as a file name. Names are per user: where
// a call names an existing process or job, root may write another user's
// as USER/NAME, a user and a name, which the daemon reads apart.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("name is empty")
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("name %.20q... is %d bytes, longer than %d", name, len(name), MaxNameLen)
	}
	if name == "." || name == ".." {
		return fmt.Errorf("name %q is not allowed", name)
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("name %q: only letters, digits, '.', '_' and '-' are allowed", name)
		}
	}
	return nil
}
