package checkpoint

import (
	"bufio"
	"os"
	"strings"
)

// harmless are Error lines CRIU logs on every restore on these kernels
// without failing.
var harmless = []string{"Can't setup RLIMIT_NOFILE"}

// LogErrors returns up to max of the Error lines of a CRIU log, without
// their timestamp prefix, last ones first kept.
func LogErrors(path string, max int) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.Index(line, "Error (")
		if i < 0 || isHarmless(line) {
			continue
		}
		out = append(out, strings.TrimSpace(line[i:]))
		if len(out) > max {
			out = out[1:]
		}
	}
	return out
}

func isHarmless(line string) bool {
	for _, h := range harmless {
		if strings.Contains(line, h) {
			return true
		}
	}
	return false
}
