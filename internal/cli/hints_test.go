package cli

import (
	"strings"
	"testing"
)

// TestMistypedCommand: a mistyped command gets its suggestion and one line
// pointing at the list of commands, not the whole usage.
func TestMistypedCommand(t *testing.T) {
	for args, want := range map[string]string{
		"sttaus":     `gpuschedctl: unknown command "sttaus"; did you mean status?`,
		"frobnicate": `gpuschedctl: unknown command "frobnicate"`,
	} {
		d := newFakeDaemon(t, nil)
		out, errOut, code := ctl(t, d, args)
		if want += "\nRun 'gpuschedctl --help' for the list of commands.\n"; code != 2 || out != "" || errOut != want {
			t.Errorf("%s: exit %d, stdout %q, stderr:\n%s\nwant:\n%s", args, code, out, errOut, want)
		}
		if len(d.requests()) > 0 {
			t.Errorf("%s called the daemon", args)
		}
	}
}

// TestCommandFlagWithoutDash: a flag of the command, given without --, is
// answered with where the command goes; a mistyped flag of gpuschedctl's
// own, before --, stays an unknown flag.
func TestCommandFlagWithoutDash(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "train", "python", "train.py", "--lr", "3"}, "put the command after --: run NAME [flags] -- CMD [ARGS...] (unknown flag: --lr)"},
		{[]string{"run", "train", "python", "train.py", "-x"}, "put the command after --: run NAME [flags] -- CMD [ARGS...] (unknown shorthand flag: 'x' in -x)"},
		{[]string{"submit", "--vram", "8G", "python", "eval.py", "--fast"}, "put the command after --: submit [flags] -- CMD [ARGS...] (unknown flag: --fast)"},
		{[]string{"acquire", "python", "serve.py", "--port", "80"}, "put the command after --: acquire [flags] -- CMD [ARGS...] (unknown flag: --port)"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) { checkUsageError(t, tt.args, tt.want) })
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "train", "--gpuu", "0", "--", "python", "train.py"}, "unknown flag: --gpuu"},
		{[]string{"run", "train", "--gpuu", "0"}, "unknown flag: --gpuu"},
		{[]string{"submit", "--vramm", "8G", "--", "python", "eval.py"}, "unknown flag: --vramm"},
	} {
		d := newFakeDaemon(t, nil)
		_, errOut, code := ctl(t, d, tt.args...)
		if first, _, _ := strings.Cut(errOut, "\n"); code != 2 || first != "gpuschedctl: "+tt.want {
			t.Errorf("%v: exit %d, stderr %q; want gpuschedctl: %s", tt.args, code, first, tt.want)
		}
	}
}
