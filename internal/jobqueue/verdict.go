package jobqueue

import "fmt"

// Verdict compares a finished job's declaration with its peak per GPU:
// "ok", "over-declared" when it used less than half, "under-declared" when
// it went past it, or a suggestion for an undeclared job.
func Verdict(declared, peak uint64) string {
	switch {
	case peak == 0 && declared == 0:
		return "undeclared; no GPU memory seen"
	case declared == 0:
		return fmt.Sprintf("undeclared; peak %d MiB per GPU: declare vram=%dM to share GPUs", peak, RaisedDeclaration(0, peak))
	case peak > declared:
		return fmt.Sprintf("under-declared: peak %d MiB per GPU went past the %d MiB declared", peak, declared)
	case peak*2 < declared:
		return fmt.Sprintf("over-declared: peak %d MiB per GPU is %d%% of the %d MiB declared", peak, peak*100/declared, declared)
	}
	return fmt.Sprintf("ok: peak %d MiB per GPU of %d MiB declared", peak, declared)
}
