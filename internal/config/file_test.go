package config

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

var update = flag.Bool("update", false, "rewrite deploy/config.example.toml from ExampleFile")

const examplePath = "../../deploy/config.example.toml"

func TestMain(m *testing.M) {
	// The tests set these themselves; none may leak in from the caller.
	os.Unsetenv(FileEnv)
	os.Unsetenv(api.SocketEnv)
	os.Exit(m.Run())
}

// load is Load without the machine's own DefaultFile.
func load(args []string, stderr io.Writer) (Config, error) {
	return LoadWith("", args, stderr)
}

// writeFile writes a config file into a fresh directory and returns its path.
func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFileValues(t *testing.T) {
	tests := []struct {
		name string
		file string
		get  func(Config) any
		want any
	}{
		{"string", `socket = "/run/x/s.sock"`, func(c Config) any { return c.Socket + " " + c.SimDir }, "/run/x/s.sock /run/x/sim"},
		{"empty string", `group = ""`, func(c Config) any { return c.Group }, ""},
		{"duration", `kill-grace = "1m30s"`, func(c Config) any { return c.KillGrace }, 90 * time.Second},
		{"size", `ram-budget = "64G"`, func(c Config) any { return c.RAMBudgetMiB }, uint64(64 << 10)},
		{"size in MiB", `thaw-margin = "300"`, func(c Config) any { return c.ThawMarginMiB }, uint64(300)},
		{"int", `log-keep = 5`, func(c Config) any { return c.LogKeep }, 5},
		{"int64", `log-max-bytes = 1_048_576`, func(c Config) any { return c.LogMaxBytes }, int64(1 << 20)},
		{"float", `spike-buffer = 0.25`, func(c Config) any { return c.SpikeBuffer }, 0.25},
		{"integer as float", `max-power = 350`, func(c Config) any { return c.MaxPowerWatts }, 350.0},
		{"bool", `freeze-stop = false`, func(c Config) any { return c.FreezeStop }, false},
		{"repeated", `ban-gpu = ["1", "GPU-8f0e2a31-0000-0000-0000-000000000000"]`, func(c Config) any { return c.BannedGPUs },
			[]string{"1", "GPU-8f0e2a31-0000-0000-0000-000000000000"}},
		{"empty array", `ban-gpu = []`, func(c Config) any { return c.BannedGPUs }, []string(nil)},
		{"version", `version = 1`, func(c Config) any { return c.Version }, SchemaVersion},
		{"comments and blank lines", "# a comment\n\nlog-level = \"debug\" # trailing\n", func(c Config) any { return c.LogLevel }, "debug"},
		{"quoted key", `"log-format" = "console"`, func(c Config) any { return c.LogFormat }, "console"},
		{"several", "sim = \"2x24G\"\ncheckpoint-driver = \"sim\"\nmax-temp = 85\n",
			func(c Config) any { return []any{c.Sim, c.CheckpointDriver, c.MaxTempC} }, []any{"2x24G", "sim", 85}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := load([]string{"--config", writeFile(t, tt.file)}, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if got := tt.get(c); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestFilePrecedence(t *testing.T) {
	const file = `
socket = "/run/file/s.sock"
kill-grace = "7s"
freeze-stop = false
ban-gpu = ["1", "2"]
max-temp = 80
`
	tests := []struct {
		name   string
		env    string // $GPUSCHED_SOCKET
		args   []string
		socket string
		grace  time.Duration
		stop   bool
		banned []string
		temp   int
	}{
		{"file over defaults", "", nil, "/run/file/s.sock", 7 * time.Second, false, []string{"1", "2"}, 80},
		{"env over file", "/run/env/s.sock", nil, "/run/env/s.sock", 7 * time.Second, false, []string{"1", "2"}, 80},
		{"flag over file", "", []string{"--socket", "/run/flag/s.sock", "--kill-grace", "2s"}, "/run/flag/s.sock", 2 * time.Second, false, []string{"1", "2"}, 80},
		{"flag over env and file", "/run/env/s.sock", []string{"--socket", "/run/flag/s.sock"}, "/run/flag/s.sock", 7 * time.Second, false, []string{"1", "2"}, 80},
		{"bool flag over file", "", []string{"--freeze-stop"}, "/run/file/s.sock", 7 * time.Second, true, []string{"1", "2"}, 80},
		{"repeated flag replaces the file's list", "", []string{"--ban-gpu", "3", "--ban-gpu", "4"}, "/run/file/s.sock", 7 * time.Second, false, []string{"3", "4"}, 80},
		{"flag restating the default still wins", "", []string{"--max-temp", "0"}, "/run/file/s.sock", 7 * time.Second, false, []string{"1", "2"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(api.SocketEnv, tt.env)
			c, err := load(append([]string{"--config", writeFile(t, file)}, tt.args...), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if c.Socket != tt.socket || c.SimDir != filepath.Join(filepath.Dir(tt.socket), "sim") || c.KillGrace != tt.grace ||
				c.FreezeStop != tt.stop || !reflect.DeepEqual(c.BannedGPUs, tt.banned) || c.MaxTempC != tt.temp {
				t.Fatalf("socket %s sim-dir %s kill-grace %v freeze-stop %v ban-gpu %q max-temp %d",
					c.Socket, c.SimDir, c.KillGrace, c.FreezeStop, c.BannedGPUs, c.MaxTempC)
			}
		})
	}
}

func TestWhichFile(t *testing.T) {
	dflt := writeFile(t, `log-level = "debug"`)
	env := writeFile(t, `log-level = "warn"`)
	flagged := writeFile(t, `log-level = "error"`)
	missing := filepath.Join(t.TempDir(), "missing.toml")
	tests := []struct {
		name    string
		dflt    string
		env     string // $GPUSCHED_CONFIG
		args    []string
		level   string // want; "" = an error naming the file
		errWant string
	}{
		{"default file", dflt, "", nil, "debug", ""},
		{"default file missing is skipped", missing, "", nil, "info", ""},
		{"no default file", "", "", nil, "info", ""},
		{"env over default file", dflt, env, nil, "warn", ""},
		{"--config over env", dflt, env, []string{"--config", flagged}, "error", ""},
		{"--config= reads no file", dflt, env, []string{"--config="}, "info", ""},
		{"--config missing is an error", dflt, "", []string{"--config", missing}, "", "config file named by --config: open " + missing + ": no such file"},
		{"env missing is an error", dflt, missing, nil, "", "config file named by $GPUSCHED_CONFIG: open " + missing + ": no such file"},
		{"default file a directory is an error", t.TempDir(), "", nil, "", "is a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(FileEnv, tt.env)
			c, err := LoadWith(tt.dflt, tt.args, io.Discard)
			if tt.level == "" {
				if err == nil || !strings.Contains(err.Error(), tt.errWant) || !strings.Contains(err.Error(), "config file") {
					t.Fatalf("err = %v, want a config file error mentioning %q", err, tt.errWant)
				}
				return
			}
			if err != nil || c.LogLevel != tt.level {
				t.Fatalf("log-level %q, %v; want %q", c.LogLevel, err, tt.level)
			}
		})
	}
}

func TestFileErrors(t *testing.T) {
	tests := []struct {
		name string
		file string
		args []string
		env  string   // $GPUSCHED_SOCKET
		want []string // each in the error; FILE stands for the file's path
		not  string   // must not be in the error
	}{
		{name: "unknown key", file: `sokcet = "/run/x.sock"`,
			want: []string{`unknown setting "sokcet" in FILE, line 1 (did you mean "socket"?)`}},
		{name: "unknown key, no suggestion", file: "\n\nzzzzzz = 1",
			want: []string{`unknown setting "zzzzzz" in FILE, line 3`}, not: "did you mean"},
		{name: "underscores", file: `kill_grace = "3s"`, want: []string{`unknown setting "kill_grace"`, `did you mean "kill-grace"?`}},
		{name: "table", file: "[daemon]\nsocket = \"/run/x.sock\"",
			want: []string{`unknown setting "daemon" in FILE, line 1 (settings are top-level keys; there are no tables)`}},
		{name: "config is no key", file: `config = "/etc/other.toml"`, want: []string{`unknown setting "config"`}},

		{name: "string wants a string", file: `socket = 5`, want: []string{`setting "socket" in FILE, line 1: want a string, not integer 5`}},
		{name: "duration wants a string", file: "\nkill-grace = 10", want: []string{`setting "kill-grace" in FILE, line 2: want a duration string such as "10s" or "1m30s", not integer 10`}},
		{name: "size wants a string", file: `ram-budget = 64`, want: []string{`setting "ram-budget" in FILE, line 1: want a size string such as "64G" or "512M", not integer 64`}},
		{name: "int wants an integer", file: `log-keep = "5"`, want: []string{`setting "log-keep" in FILE, line 1: want an integer, not string "5"`}},
		{name: "int rejects a float", file: `max-temp = 80.5`, want: []string{`want an integer, not float 80.5`}},
		{name: "float wants a number", file: `spike-buffer = "0.1"`, want: []string{`want a number, not string "0.1"`}},
		{name: "bool wants a bool", file: `freeze-stop = "no"`, want: []string{`setting "freeze-stop" in FILE, line 1: want true or false, not string "no"`}},
		{name: "repeated wants an array", file: `ban-gpu = "1"`, want: []string{`setting "ban-gpu" in FILE, line 1: want an array of strings, not string "1"`}},
		{name: "repeated wants strings", file: `ban-gpu = ["0", 1]`, want: []string{`setting "ban-gpu" in FILE, line 1: item 2: want a string, not integer 1`}},
		{name: "datetime", file: `socket = 2024-01-01`, want: []string{`want a string, not a date/time`}},
		{name: "inline table", file: `socket = {path = "/x"}`, want: []string{`want a string, not a table`}},

		{name: "bad duration", file: `kill-grace = "ten"`, want: []string{`setting "kill-grace" in FILE, line 1: invalid value "ten": parse error (want a duration string such as "10s" or "1m30s")`}},
		{name: "bad size", file: `ram-budget = "64Q"`, want: []string{`setting "ram-budget" in FILE, line 1: invalid value "64Q": size "64Q": unknown unit "q"`}},
		{name: "bad repeated item", file: `ban-gpu = ["1", "-2"]`, want: []string{`item 2: invalid value "-2": GPU index -2 is negative`}},

		{name: "version", file: `version = 2`, want: []string{`setting "version" in FILE, line 1: schema version 2: this daemon understands version 1`}},
		{name: "version type", file: `version = "1"`, want: []string{`setting "version" in FILE, line 1: want an integer, not string "1"`}},

		{name: "syntax", file: "socket = \"/run/x.sock\"\nkill-grace = \"3s", want: []string{`config file FILE, line 2: bad TOML:`}},
		{name: "syntax: duplicate key", file: "log-keep = 1\nlog-keep = 2", want: []string{`config file FILE, line 2: bad TOML:`, `log-keep`}},
		{name: "every bad key at once", file: "sokcet = \"/x\"\nlog-keep = \"5\"\n",
			want: []string{`unknown setting "sokcet" in FILE, line 1`, `setting "log-keep" in FILE, line 2`}},

		{name: "validate names the file", file: "log-level = \"info\"\nkill-grace = \"0s\"",
			want: []string{`--kill-grace 0s: must be positive (kill-grace is set in FILE, line 2)`}},
		{name: "validate, two keys", file: "sim-checkpoint-per-gib = \"-1s\"\nsim-restore-per-gib = \"-1s\"",
			want: []string{`--sim-checkpoint-per-gib/--sim-restore-per-gib: must not be negative (sim-checkpoint-per-gib is set in FILE, line 1; sim-restore-per-gib is set in FILE, line 2)`}},
		{name: "validate, cross-setting", file: `checkpoint-driver = "sim"`,
			want: []string{`--checkpoint-driver sim: needs --sim (checkpoint-driver is set in FILE, line 1)`}},
		{name: "validate, flag overrode the file", file: `kill-grace = "0s"`, args: []string{"--kill-grace", "0s"},
			want: []string{`--kill-grace 0s: must be positive`}, not: "is set in"},
		{name: "validate, flag overrode the file's socket", file: `socket = "/run/x.sock"`, args: []string{"--socket", "rel.sock"},
			want: []string{`--socket "rel.sock": must be an absolute path`}, not: "is set in"},
		{name: "validate, env overrode the file", file: `socket = "rel.sock"`, env: "env.sock",
			want: []string{`--socket "env.sock": must be an absolute path`}, not: "is set in"},
		{name: "validate, the file's socket", file: `socket = "rel.sock"`,
			want: []string{`--socket "rel.sock": must be an absolute path (socket is set in FILE, line 1)`}},
		{name: "validate, other keys unmentioned", file: "log-keep = 3\nlog-format = \"xml\"",
			want: []string{`--log-format "xml": must be json or console (log-format is set in FILE, line 2)`}, not: "log-keep is set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(api.SocketEnv, tt.env)
			path := writeFile(t, tt.file)
			_, err := load(append([]string{"--config", path}, tt.args...), io.Discard)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if w = strings.ReplaceAll(w, "FILE", path); !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v\nwant it to contain %s", err, w)
				}
			}
			if tt.not != "" && strings.Contains(err.Error(), tt.not) {
				t.Errorf("err = %v\nmust not contain %s", err, tt.not)
			}
		})
	}
}

// uncommented is the example file with every setting uncommented.
func uncommented(t *testing.T) string {
	t.Helper()
	setting := regexp.MustCompile(`(?m)^# ([a-z0-9-]+ = .*)$`)
	text := setting.ReplaceAllString(ExampleFile(), "$1")
	if n := len(setting.FindAllString(ExampleFile(), -1)); n < 40 {
		t.Fatalf("only %d settings in the example", n)
	}
	return text
}

func TestExampleRestatesDefaults(t *testing.T) {
	path := writeFile(t, uncommented(t))

	// Straight onto Default(): every field unchanged.
	c := Default()
	src, err := readFile(c.flags(new(string), "", io.Discard), path, "test")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Fatalf("the example changes the defaults:\n got %+v\nwant %+v", c, Default())
	}
	c.flags(new(string), "", io.Discard).VisitAll(func(f *flag.Flag) {
		if _, ok := src.lines[f.Name]; !ok && f.Name != configFlag {
			t.Errorf("the example does not set %s", f.Name)
		}
	})

	// Through Load, alone and under flags: the file changes nothing. (Its
	// state-dir and log-dir, set, keep a daemon on another socket off the
	// directories beside it: TestDirsBesideSocket.)
	for _, args := range [][]string{nil, {"--sim", "2", "--kill-grace", "3s", "--ban-gpu", "1", "--socket", "/run/t/s.sock",
		"--state-dir", "/srv/gs", "--log-dir", "/srv/gs-logs"}} {
		want, err := load(args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		got, err := load(append([]string{"--config", path}, args...), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("args %q: with the example\n got %+v\nwant %+v", args, got, want)
		}
	}
}

func TestExampleFile(t *testing.T) {
	want := ExampleFile()
	if *update {
		if err := os.WriteFile(examplePath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("deploy/config.example.toml is out of date with the flags; regenerate it with\n\tgo test ./internal/config -run TestExampleFile -update")
	}
}

// Every flag is a key: the example shows each with its usage, and a
// repeatable flag is an array.
func TestEveryFlagIsAKey(t *testing.T) {
	example := ExampleFile()
	c := Default()
	n := 0
	keys(c.flags(new(string), "", io.Discard), func(f *flag.Flag) {
		n++
		if !strings.Contains(example, "\n# "+f.Name+" = ") {
			t.Errorf("%s: not in the example", f.Name)
		}
		if strings.Contains(f.Usage, "repeatable") && kindOf(f).toml != tomlArray {
			t.Errorf("%s is repeatable but its key is no array: bind it with listFlag, not fs.Func", f.Name)
		}
	})
	if n < 40 {
		t.Fatalf("only %d keys", n)
	}
	if strings.Contains(example, "\n# config = ") {
		t.Error("--config is no key of the file")
	}
}

func TestTOMLQuote(t *testing.T) {
	for _, s := range []string{"", "plain", `a "quoted" \ path`, "tab\tnew\nline\x01\x7f", "ünïcode"} {
		c := Default()
		if err := (&source{path: "q.toml", lines: map[string]int{}}).decode(c.flags(new(string), "", io.Discard), []byte("socket = "+tomlQuote(s))); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if c.Socket != s {
			t.Errorf("%q came back as %q", s, c.Socket)
		}
	}
}

func FuzzFile(f *testing.F) {
	f.Add([]byte(`socket = "/run/x.sock"`))
	f.Add([]byte("ban-gpu = [\"1\", 2]\n[t]\nx = 1\n[[a]]\n"))
	f.Add([]byte("kill-grace = 10\nversion = 2\nsokcet = {}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := Default()
		src := &source{path: "fuzz.toml", lines: map[string]int{}}
		if err := src.decode(c.flags(new(string), "", io.Discard), data); err == nil {
			_ = src.annotate(c.Validate())
		}
	})
}

// The example in docs/config.md loads.
func TestDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```toml\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/config.md has no ```toml example")
	}
	c, err := load([]string{"--config", writeFile(t, string(m[1]))}, io.Discard)
	if err != nil {
		t.Fatalf("docs/config.md's example: %v", err)
	}
	if c.RAMBudgetMiB != 128<<10 || !reflect.DeepEqual(c.BannedGPUs, []string{"7"}) {
		t.Fatalf("docs/config.md's example: %+v", c)
	}
}

func TestHelpNamesConfig(t *testing.T) {
	var out strings.Builder
	if _, err := LoadWith(DefaultFile, []string{"-h"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	if !strings.Contains(out.String(), "-config") || !strings.Contains(out.String(), DefaultFile) || !strings.Contains(out.String(), FileEnv) {
		t.Fatalf("-h does not explain --config:\n%s", out.String())
	}
}
