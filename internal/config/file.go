package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/gpusched/gpusched/internal/tomlline"
	"github.com/gpusched/gpusched/pkg/api"
)

// DefaultFile is the configuration file read when neither --config nor
// $GPUSCHED_CONFIG names one; it may be absent.
const DefaultFile = "/etc/gpusched/config.toml"

// FileEnv names the environment variable that names the configuration
// file (--config wins over it).
const FileEnv = "GPUSCHED_CONFIG"

// configFlag names the file; it is the one flag that is no key of the file.
const configFlag = "config"

// versionKey is the file's schema version, checked against SchemaVersion.
const versionKey = "version"

// ErrVersion is Load's answer to --version: print the version and exit.
var ErrVersion = errors.New("version requested")

// LoadWith is Load with defaultFile read when neither --config nor
// $GPUSCHED_CONFIG names a file ("" reads none). The layers, each
// overriding the one before: Default(), the file, $GPUSCHED_SOCKET, args.
// A named file must exist; defaultFile is skipped when it does not. A
// socket other than the default named by the command line or the
// environment takes along the state and log directories that neither the
// file nor the command line set (besideSocket).
func LoadWith(defaultFile string, args []string, stderr io.Writer) (Config, error) {
	// The command line alone first: it may name the file, and says which
	// settings the file must not decide.
	scratch, path := Default(), ""
	cmdline := scratch.flags(&path, defaultFile, stderr)
	version := cmdline.Bool("version", false, "print gpuschedd's version and exit")
	if err := cmdline.Parse(args); err != nil {
		return Config{}, err
	}
	if *version {
		return Config{}, ErrVersion
	}
	if cmdline.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q", cmdline.Arg(0))
	}
	onCmdline := map[string]bool{}
	cmdline.Visit(func(f *flag.Flag) { onCmdline[f.Name] = true })
	namedBy := "" // who named the file: then it must exist
	switch p := os.Getenv(FileEnv); {
	case onCmdline[configFlag]: // --config "" reads no file
		namedBy = "--" + configFlag
	case p != "":
		path, namedBy = p, "$"+FileEnv
	default:
		path = defaultFile
	}

	c := Default()
	fset := c.flags(new(string), defaultFile, io.Discard)
	src, err := readFile(fset, path, namedBy)
	if err != nil {
		return Config{}, err
	}
	if p := os.Getenv(api.SocketEnv); p != "" {
		c.Socket = p
		delete(src.lines, "socket")
	}
	for name := range onCmdline {
		if l, ok := fset.Lookup(name).Value.(*listFlag); ok {
			l.reset() // the command line's list replaces the file's
		}
		delete(src.lines, name)
	}
	if err := fset.Parse(args); err != nil {
		return Config{}, err
	}
	if c.SimDir == "" {
		c.SimDir = filepath.Join(filepath.Dir(c.Socket), "sim")
	}
	if onCmdline["socket"] || os.Getenv(api.SocketEnv) != "" {
		set := func(flag string) bool { _, inFile := src.lines[flag]; return onCmdline[flag] || inFile }
		if err := c.besideSocket(set); err != nil {
			return Config{}, err
		}
	}
	return c, src.annotate(c.Validate())
}

// flags is the daemon's flag set bound to c, plus --config bound to path.
func (c *Config) flags(path *string, defaultFile string, out io.Writer) *flag.FlagSet {
	fset := flag.NewFlagSet("gpuschedd", flag.ContinueOnError)
	fset.SetOutput(out)
	c.bind(fset)
	def := "none"
	if defaultFile != "" {
		def = defaultFile + " when it exists"
	}
	fset.StringVar(path, configFlag, *path, "TOML configuration file whose keys are these flags' names; flags override it (also $"+FileEnv+"; default: "+def+")")
	return fset
}

// keys calls fn for each setting a file may hold, in name order: every
// flag but --config.
func keys(fset *flag.FlagSet, fn func(*flag.Flag)) {
	fset.VisitAll(func(f *flag.Flag) {
		if f.Name != configFlag {
			fn(f)
		}
	})
}

// source remembers where the file set each setting, so that Validate's
// complaints about them can point there.
type source struct {
	path  string
	lines map[string]int // key -> line
}

// readFile applies the TOML file at path to the values bound in fset.
// A missing file is an error only when namedBy says who named it; path ""
// reads nothing.
func readFile(fset *flag.FlagSet, path, namedBy string) (*source, error) {
	src := &source{path: path, lines: map[string]int{}}
	if path == "" {
		return src, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && namedBy == "" {
		return src, nil
	}
	if err != nil && namedBy != "" {
		return nil, fmt.Errorf("config file named by %s: %w", namedBy, err)
	}
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	return src, src.decode(fset, data)
}

// decode applies the file's TOML text to the values bound in fset,
// remembering each key's line; it reports every bad key at once.
func (src *source) decode(fset *flag.FlagSet, data []byte) error {
	path := src.path
	var top map[string]toml.Primitive
	md, err := toml.Decode(string(data), &top)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return fmt.Errorf("config file %s, line %d: bad TOML: %s", path, pe.Position.Line, pe.Message)
		}
		return fmt.Errorf("config file %s: bad TOML: %w", path, err)
	}
	var errs []error
	for _, k := range md.Keys() {
		if len(k) != 1 {
			continue // inside a table: the table itself is reported
		}
		key := k[0]
		line, err := tomlline.ValueAt(&md, top[key], func(v any) error { return apply(fset, key, v) })
		src.lines[key] = line
		if err == nil {
			continue
		}
		var unknown unknownError
		if errors.As(err, &unknown) {
			err = fmt.Errorf("unknown setting %q in %s%s%s", key, path, lineSuffix(line), unknown.hint)
		} else {
			err = fmt.Errorf("setting %q in %s%s: %w", key, path, lineSuffix(line), err)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func lineSuffix(line int) string {
	if line <= 0 {
		return ""
	}
	return ", line " + strconv.Itoa(line)
}

type unknownError struct{ hint string }

func (unknownError) Error() string { return "unknown setting" }

// apply sets the flag named key from a TOML value, through the flag's own
// Set, so a file's value is checked exactly as the flag's would be.
func apply(fset *flag.FlagSet, key string, v any) error {
	if key == versionKey {
		n, ok := v.(int64)
		if !ok {
			return fmt.Errorf("want an integer, not %s", describe(v))
		}
		if n != SchemaVersion {
			return fmt.Errorf("schema version %d: this daemon understands version %d", n, SchemaVersion)
		}
		return nil
	}
	f := fset.Lookup(key)
	if f == nil || key == configFlag {
		return unknownError{hint: suggest(fset, key, v)}
	}
	k := kindOf(f)
	wrong := fmt.Errorf("want %s, not %s", k.want, describe(v))
	set := func(s string) error {
		if err := f.Value.Set(s); err != nil {
			shown := s
			if k.toml == tomlString || k.toml == tomlArray {
				shown = strconv.Quote(s)
			}
			if k.hint {
				return fmt.Errorf("invalid value %s: %v (want %s)", shown, err, k.want)
			}
			return fmt.Errorf("invalid value %s: %v", shown, err)
		}
		return nil
	}
	switch k.toml {
	case tomlArray:
		items, ok := v.([]any)
		if !ok {
			return wrong
		}
		f.Value.(*listFlag).reset() // the file's list replaces the default
		for i, item := range items {
			s, ok := item.(string)
			if !ok {
				return fmt.Errorf("item %d: want a string, not %s", i+1, describe(item))
			}
			if err := set(s); err != nil {
				return fmt.Errorf("item %d: %w", i+1, err)
			}
		}
		return nil
	case tomlBool:
		b, ok := v.(bool)
		if !ok {
			return wrong
		}
		return set(strconv.FormatBool(b))
	case tomlInteger:
		n, ok := v.(int64)
		if !ok {
			return wrong
		}
		return set(strconv.FormatInt(n, 10))
	case tomlFloat:
		switch n := v.(type) {
		case int64:
			return set(strconv.FormatInt(n, 10))
		case float64:
			return set(strconv.FormatFloat(n, 'g', -1, 64))
		}
		return wrong
	default:
		s, ok := v.(string)
		if !ok {
			return wrong
		}
		return set(s)
	}
}

// suggest is the hint for an unknown key: a close flag name, or a word on
// tables.
func suggest(fset *flag.FlagSet, key string, v any) string {
	if _, ok := v.(map[string]any); ok {
		return " (settings are top-level keys; there are no tables)"
	}
	best, bestDist := "", 3 // at most two edits away
	consider := func(name string) {
		if d := editDistance(strings.ToLower(key), name); d < bestDist {
			best, bestDist = name, d
		}
	}
	consider(versionKey)
	keys(fset, func(f *flag.Flag) { consider(f.Name) })
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// describe names a decoded TOML value for an error message.
func describe(v any) string {
	switch v := v.(type) {
	case string:
		return "string " + strconv.Quote(v)
	case int64:
		return "integer " + strconv.FormatInt(v, 10)
	case float64:
		return "float " + strconv.FormatFloat(v, 'g', -1, 64)
	case bool:
		return "boolean " + strconv.FormatBool(v)
	case []any:
		return "an array"
	case []map[string]any:
		return "an array of tables"
	case map[string]any:
		return "a table"
	case time.Time:
		return "a date/time"
	}
	return fmt.Sprintf("%T", v)
}

// The TOML types a setting takes.
const (
	tomlString = iota
	tomlInteger
	tomlFloat
	tomlBool
	tomlArray
)

// kind is how a flag's value is written in the file.
type kind struct {
	toml int
	want string // for errors: what the key wants
	hint bool   // the flag's own parse errors are terse: add want to them
	dflt string // the example file's value for the flag's default
}

// kindOf reads a flag's kind from its Value: repeatable flags are arrays,
// sizes strings, and the standard flag types (flag.Getter) what they hold;
// anything else is a string.
func kindOf(f *flag.Flag) kind {
	switch v := f.Value.(type) {
	case *listFlag:
		items := make([]string, 0, len(*v.p))
		for _, s := range *v.p {
			items = append(items, tomlQuote(s))
		}
		return kind{tomlArray, "an array of strings", false, "[" + strings.Join(items, ", ") + "]"}
	case mibFlag:
		return kind{tomlString, `a size string such as "64G" or "512M"`, false, tomlQuote(f.DefValue)}
	case interface{ IsBoolFlag() bool }:
		if v.IsBoolFlag() {
			return kind{tomlBool, "true or false", false, f.DefValue}
		}
	}
	if g, ok := f.Value.(flag.Getter); ok {
		switch g.Get().(type) {
		case bool:
			return kind{tomlBool, "true or false", false, f.DefValue}
		case int, int64:
			return kind{tomlInteger, "an integer", true, f.DefValue}
		case uint, uint64:
			return kind{tomlInteger, "an integer >= 0", true, f.DefValue}
		case float64:
			d := f.DefValue
			if !strings.ContainsAny(d, ".eEIN") {
				d += ".0" // a TOML float, as the key wants
			}
			return kind{tomlFloat, "a number", true, d}
		case time.Duration:
			d := f.DefValue // "10m0s" reads better as "10m", "1h0m0s" as "1h"
			if strings.HasSuffix(d, "m0s") {
				d = strings.TrimSuffix(d, "0s")
			}
			if strings.HasSuffix(d, "h0m") {
				d = strings.TrimSuffix(d, "0m")
			}
			return kind{tomlString, `a duration string such as "10s" or "1m30s"`, true, tomlQuote(d)}
		}
	}
	return kind{tomlString, "a string", false, tomlQuote(f.DefValue)}
}

// tomlQuote writes s as a TOML basic string.
func tomlQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// flagName finds the settings a Validate message names ("--kill-grace 0s:
// ...", "--aging-step/--starve-after: ...").
var flagName = regexp.MustCompile(`(?:^|[\s/(])--([a-z0-9][a-z0-9-]*)`)

// annotate adds to each of Validate's complaints where the file set the
// settings it names, for those the environment or a flag did not override.
func (s *source) annotate(err error) error {
	if err == nil || len(s.lines) == 0 {
		return err
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	out := make([]error, 0, len(errs))
	for _, e := range errs {
		var where []string
		seen := map[string]bool{}
		for _, m := range flagName.FindAllStringSubmatch(e.Error(), -1) {
			name := m[1]
			if line, ok := s.lines[name]; ok && !seen[name] {
				seen[name] = true
				where = append(where, fmt.Sprintf("%s is set in %s%s", name, s.path, lineSuffix(line)))
			}
		}
		if len(where) > 0 {
			e = fmt.Errorf("%w (%s)", e, strings.Join(where, "; "))
		}
		out = append(out, e)
	}
	return errors.Join(out...)
}

// ExampleFile renders deploy/config.example.toml: every setting, commented
// out, with its flag's usage and its default.
func ExampleFile() string {
	c := Default()
	fset := c.flags(new(string), DefaultFile, io.Discard)
	var b strings.Builder
	b.WriteString(`# gpuschedd configuration file (TOML): deploy/config.example.toml.
#
# Generated from the daemon's flags by config.ExampleFile; do not edit.
# Regenerate with: go test ./internal/config -run TestExampleFile -update
#
# gpuschedd reads the file named by --config PATH, else by $` + FileEnv + `,
# else ` + DefaultFile + ` when it exists. Every key is the flag of
# the same name (gpuschedd -h); the values below are the defaults.
# Precedence: defaults < this file < $` + api.SocketEnv + ` < flags.
# See docs/config.md.

# Schema version of this file.
version = ` + strconv.Itoa(SchemaVersion) + "\n")
	keys(fset, func(f *flag.Flag) {
		b.WriteString("\n")
		for _, line := range wrap(f.Usage, 76) {
			b.WriteString("# " + line + "\n")
		}
		fmt.Fprintf(&b, "# %s = %s\n", f.Name, kindOf(f).dflt)
	})
	return b.String()
}

// wrap breaks s into lines of at most width bytes at spaces.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}
