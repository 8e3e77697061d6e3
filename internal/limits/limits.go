package limits

import "fmt"

// Root is the uid the caps never apply to: the operator.
const Root = 0

// Exceeded is a request refused because it would take its user past a cap.
// Its message names the cap's setting, so that a caller knows what to ask an
// operator for.
type Exceeded struct {
	Flag string // the setting, without dashes: "max-procs-per-user"
	Msg  string
}

func (e *Exceeded) Error() string { return e.Msg }

// Check refuses (with an *Exceeded naming --flag) when a user who holds have
// of something, capped at max (0: no cap), asks for one more. Root is
// never refused.
func Check(uid uint32, user string, have, max int, flag, what string) error {
	if uid == Root || max <= 0 || have < max {
		return nil
	}
	return &Exceeded{Flag: flag, Msg: fmt.Sprintf("user %s has %d %s, the most --%s allows; %s",
		user, have, what, flag, "end some first, or ask the operator to raise --"+flag)}
}
