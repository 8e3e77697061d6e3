package cli

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gpusched/gpusched/pkg/api"
)

// csvColumns are a jobs CSV's columns, in order; a first row of exactly
// these names is a header.
var csvColumns = []string{"directory", "executable", "filename", "epochs", "priority"}

// parseJobsCSV reads rows of directory,executable,filename,epochs,priority
// into jobs that run EXECUTABLE FILENAME [--epochs EPOCHS] in DIRECTORY at
// PRIORITY (empty: the default), each with defaults for everything else.
// Lines starting with # are comments. Any bad row fails the whole file: the
// error lists every problem as "NAME:LINE: message" and no job is returned.
func parseJobsCSV(r io.Reader, name string, defaults api.JobSpec) ([]api.JobSpec, error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	errs := lineErrors{file: name}
	var specs []api.JobSpec
	for first := true; ; first = false {
		row, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			errs.add(pe.StartLine, "%s", pe.Err)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		line, _ := cr.FieldPos(0)
		for i := range row {
			row[i] = strings.TrimSpace(row[i])
		}
		if first {
			row[0] = strings.TrimPrefix(row[0], "\ufeff") // a byte-order mark, as spreadsheets write
			if slices.Equal(row, csvColumns) {
				continue
			}
		}
		spec, problems := csvJob(row, defaults)
		for _, p := range problems {
			errs.add(line, "%s", p)
		}
		if len(problems) == 0 {
			specs = append(specs, spec)
		}
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("%s: no jobs: every row is blank, a comment or the header", name)
	}
	return specs, nil
}

// csvJob turns one row into a job, or returns every problem with it.
func csvJob(row []string, defaults api.JobSpec) (api.JobSpec, []string) {
	spec := defaults
	if len(row) != len(csvColumns) {
		return spec, []string{fmt.Sprintf("want %d fields (%s), got %d", len(csvColumns), strings.Join(csvColumns, ","), len(row))}
	}
	var problems []string
	for i, f := range row {
		if err := checkText(f); err != nil {
			problems = append(problems, fmt.Sprintf("%s %s", csvColumns[i], err))
		}
	}
	if len(problems) > 0 {
		return spec, problems
	}
	dir, exe, file, epochs, priority := row[0], row[1], row[2], row[3], row[4]
	switch {
	case dir == "":
		problems = append(problems, "directory is empty: want an absolute path")
	case !filepath.IsAbs(dir):
		problems = append(problems, fmt.Sprintf("directory %q is not an absolute path", dir))
	}
	if exe == "" {
		problems = append(problems, "executable is empty")
	}
	if file == "" {
		problems = append(problems, "filename is empty")
	}
	spec.Dir = dir
	spec.Cmd = []string{exe, file}
	if epochs != "" {
		n, err := strconv.Atoi(epochs)
		if err != nil || n < 1 {
			problems = append(problems, fmt.Sprintf("epochs %q: want a whole number, 1 or more", epochs))
		}
		spec.Cmd = append(spec.Cmd, "--epochs", strconv.Itoa(n))
	}
	if priority != "" {
		n, err := strconv.Atoi(priority)
		if err != nil {
			problems = append(problems, fmt.Sprintf("priority %q: want a whole number", priority))
		}
		spec.Priority = n
	}
	return spec, problems
}
