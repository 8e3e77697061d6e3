package cli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

// maxJobLine bounds one line of a jobs file.
const maxJobLine = 64 << 10

// jobOptions are the keys of a jobs-file line's [options] block, each with
// the form its help shows.
var jobOptions = map[string]string{
	"vram":        "vram=SIZE or vram=auto",
	"gpus":        "gpus=N",
	"priority":    "priority=N",
	"timeout":     "timeout=DURATION",
	"retries":     "retries=N",
	"preemptible": "preemptible[=true|false]",
	"name":        "name=NAME",
	"nice":        "nice=N",
	// NVIDIA MPS client attributes (docs/mps.md).
	"mps_threads":   "mps_threads=PERCENT",
	"mps_mem_limit": "mps_mem_limit=SIZE",
}

// parseJobsFile reads a jobs file: one shell command per line, run as
// ["/bin/sh", "-c", LINE], each optionally led by an [options] block that
// overrides defaults for that line. Blank lines and # comments are skipped.
// Any bad line fails the whole file: the error lists every problem as
// "NAME:LINE: message" and no job is returned.
func parseJobsFile(r io.Reader, name string, defaults api.JobSpec) ([]api.JobSpec, error) {
	br := bufio.NewReader(r)
	errs := lineErrors{file: name}
	var specs []api.JobSpec
	named := map[string]int{} // job name -> its line
	for n := 1; ; n++ {
		line, tooLong, err := readLine(br)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		if tooLong {
			errs.add(n, "line is longer than %d KiB", maxJobLine>>10)
			continue
		}
		spec, problems := parseJobLine(string(line), defaults)
		for _, p := range problems {
			errs.add(n, "%s", p)
		}
		if len(problems) > 0 || spec == nil {
			continue
		}
		if spec.Name != "" {
			if first, dup := named[spec.Name]; dup {
				errs.add(n, "name %q is already used on line %d", spec.Name, first)
				continue
			}
			named[spec.Name] = n
		}
		specs = append(specs, *spec)
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("%s: no jobs: every line is blank or a comment", name)
	}
	return specs, nil
}

// readLine reads one line without its "\n" or "\r\n". A line longer than
// maxJobLine is read to its end and reported as too long. At the end of
// the input it returns io.EOF.
func readLine(br *bufio.Reader) (line []byte, tooLong bool, err error) {
	read := 0
	for {
		chunk, err := br.ReadSlice('\n')
		read += len(chunk)
		if !tooLong {
			line = append(line, chunk...)
			if len(line) > maxJobLine+len("\r\n") {
				line, tooLong = nil, true
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) && read > 0 {
			err = nil
		}
		if err != nil {
			return nil, false, err
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		return line, tooLong || len(line) > maxJobLine, nil
	}
}

// parseJobLine reads one line: nil without problems for a blank line or a
// comment, else its job or every problem found in it.
func parseJobLine(line string, defaults api.JobSpec) (*api.JobSpec, []string) {
	if strings.IndexByte(line, 0) >= 0 {
		return nil, []string{"line contains a NUL byte"}
	}
	text := strings.TrimSpace(line)
	if text == "" || text[0] == '#' {
		return nil, nil
	}
	if err := checkText(text); err != nil {
		return nil, []string{"line " + err.Error()}
	}
	spec := defaults
	var problems []string
	if text[0] == '[' {
		end := strings.IndexByte(text, ']')
		if end < 0 {
			return nil, []string{`unclosed "[": end the options with "]"`}
		}
		problems = setJobOptions(&spec, text[1:end])
		text = strings.TrimSpace(text[end+1:])
		if text == "" {
			problems = append(problems, "no command after the options")
		}
	}
	spec.Cmd = []string{"/bin/sh", "-c", text}
	return &spec, problems
}

// setJobOptions applies the options of a [block] to spec and returns every
// problem with them.
func setJobOptions(spec *api.JobSpec, block string) []string {
	var problems []string
	seen := map[string]bool{}
	for _, opt := range strings.Fields(block) {
		key, value, hasValue := strings.Cut(opt, "=")
		form, known := jobOptions[key]
		switch {
		case !known:
			problems = append(problems, fmt.Sprintf("unknown option %q (want vram, gpus, priority, timeout, retries, preemptible, name, nice, mps_threads or mps_mem_limit)", key))
			continue
		case seen[key]:
			problems = append(problems, fmt.Sprintf("option %q is given twice", key))
			continue
		case value == "" && (hasValue || key != "preemptible"):
			problems = append(problems, fmt.Sprintf("option %q needs a value: %s", key, form))
			continue
		}
		seen[key] = true
		if err := setJobOption(spec, key, value, hasValue); err != nil {
			problems = append(problems, err.Error())
		}
	}
	return problems
}

// setJobOption sets one option of spec from its value.
func setJobOption(spec *api.JobSpec, key, value string, hasValue bool) error {
	switch key {
	case "vram":
		v, err := api.ParseVRAM(value)
		if err != nil {
			return err
		}
		spec.VRAM = v
	case "gpus":
		n, err := strconv.Atoi(value)
		if err != nil || n < 1 {
			return fmt.Errorf("gpus %q: want a whole number, 1 or more", value)
		}
		spec.GPUs = n
	case "priority":
		n, err := strconv.Atoi(value)
		if err != nil {
			return fmt.Errorf("priority %q: want a whole number", value)
		}
		spec.Priority = n
	case "timeout":
		d, err := parseTimeout(value)
		if err != nil {
			return fmt.Errorf("timeout %q: %w", value, err)
		}
		spec.Timeout = api.Duration(d)
	case "retries":
		n, err := strconv.Atoi(value)
		if err != nil || n < 0 {
			return fmt.Errorf("retries %q: want a whole number, 0 or more", value)
		}
		spec.Retries = n
	case "preemptible":
		b := true
		if hasValue {
			var err error
			if b, err = strconv.ParseBool(value); err != nil {
				return fmt.Errorf("preemptible %q: want true or false", value)
			}
		}
		spec.Preemptible = b
	case "name":
		if err := api.ValidateName(value); err != nil {
			return err
		}
		spec.Name = value
	case "nice":
		n, err := strconv.Atoi(value)
		if err != nil || n < -20 || n > 19 {
			return fmt.Errorf("nice %q: want a whole number, -20..19", value)
		}
		spec.Nice = n
	case "mps_threads":
		n, err := strconv.Atoi(value)
		if err != nil || n < 1 || n > 100 {
			return fmt.Errorf("mps_threads %q: want a percentage, 1..100", value)
		}
		spec.MPSThreads = n
	case "mps_mem_limit":
		n, err := api.ParseMiB(value)
		if err != nil {
			return fmt.Errorf("mps_mem_limit: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("mps_mem_limit %q: must be more than 0", value)
		}
		spec.MPSMemLimit = api.VRAM{MiB: n}
	}
	return nil
}

// parseTimeout reads a Go duration ("90m", "2h30m") or whole seconds.
func parseTimeout(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return 0, fmt.Errorf("must not be negative")
		}
		return d, nil
	}
	secs, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("want a duration like 90m or 2h30m, or whole seconds")
	}
	if secs > math.MaxInt64/uint64(time.Second) {
		return 0, fmt.Errorf("too long")
	}
	return time.Duration(secs) * time.Second, nil
}
