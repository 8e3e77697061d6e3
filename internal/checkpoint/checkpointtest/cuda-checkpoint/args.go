package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpusched/gpusched/internal/checkpoint/checkpointtest"
)

const usageLine = "usage: cuda-checkpoint [--get-state | --action <lock|checkpoint|restore|unlock> | --get-restore-tid | --toggle] --pid <pid> [--timeout <ms>] [--device-map <old=new,...>] | --help\n"

// helpText is the --help output, narrowed by the help fault.
func helpText(f checkpointtest.Fault) string {
	var b strings.Builder
	b.WriteString("CUDA checkpoint and restore utility.\n")
	b.WriteString("Version 570.0.0 (gpusched fake for tests). No warranty.\n\n")
	b.WriteString("    --toggle --pid <value>\n        Toggle the state of CUDA in the process between suspended and running.\n\n")
	if !f.NoAction {
		b.WriteString("    --action <lock|checkpoint|restore|unlock> --pid <value> [--timeout <ms>]")
		if !f.NoDeviceMap {
			b.WriteString(" [--device-map <OLD=NEW,...>]")
		}
		b.WriteString("\n        Perform one step of a checkpoint or restore.\n\n")
	}
	b.WriteString("    --get-state --pid <value>\n        Print the CUDA state of the process.\n\n")
	b.WriteString("    --get-restore-tid --pid <value>\n        Print the thread id of the process's restore thread.\n\n")
	b.WriteString("    --help\n        Print this help.\n")
	return b.String()
}

// invocation is one parsed command line.
type invocation struct {
	mode      string // "help", "get-state", "action", "get-restore-tid", "toggle"
	action    string // with mode "action"
	pid       int
	timeoutMS int               // 0: none
	deviceMap map[string]string // old uuid -> new uuid
}

// parseArgs parses the command line, accepting "--flag value" and
// "--flag=value"; flags the help fault removed are unknown.
func parseArgs(args []string, help checkpointtest.Fault) (invocation, error) {
	var inv invocation
	setMode := func(m string) error {
		if inv.mode != "" {
			return fmt.Errorf("--%s and --%s are exclusive", inv.mode, m)
		}
		inv.mode = m
		return nil
	}
	for i := 0; i < len(args); i++ {
		name, val, hasVal := strings.Cut(args[i], "=")
		value := func() (string, error) {
			if hasVal {
				return val, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", name)
			}
			i++
			return args[i], nil
		}
		var err error
		switch {
		case name == "--help" || name == "-h":
			err = setMode("help")
		case name == "--get-state", name == "--get-restore-tid", name == "--toggle":
			err = setMode(strings.TrimPrefix(name, "--"))
		case name == "--action" && !help.NoAction:
			if err = setMode("action"); err == nil {
				inv.action, err = value()
			}
		case name == "--pid":
			inv.pid, err = intValue(value)
		case name == "--timeout":
			inv.timeoutMS, err = intValue(value)
		case name == "--device-map" && !help.NoDeviceMap:
			var m string
			if m, err = value(); err == nil {
				inv.deviceMap, err = parseDeviceMap(m)
			}
		default:
			err = fmt.Errorf("unknown argument %q", args[i])
		}
		if err != nil {
			return invocation{}, err
		}
	}
	switch inv.action {
	case "", "lock", "checkpoint", "restore", "unlock":
	default:
		return invocation{}, fmt.Errorf("unknown action %q", inv.action)
	}
	switch {
	case inv.mode == "":
		return invocation{}, errors.New("no operation given")
	case inv.mode != "help" && inv.pid <= 0:
		return invocation{}, errors.New("--pid is required")
	case inv.deviceMap != nil && inv.action != "restore":
		return invocation{}, errors.New("--device-map goes with --action restore")
	}
	return inv, nil
}

func intValue(value func() (string, error)) (int, error) {
	s, err := value()
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad number %q", s)
	}
	return n, nil
}

// parseDeviceMap parses "GPU-a=GPU-b,GPU-c=GPU-d".
func parseDeviceMap(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		old, new, ok := strings.Cut(pair, "=")
		if !ok || old == "" || new == "" {
			return nil, fmt.Errorf("bad --device-map entry %q", pair)
		}
		m[old] = new
	}
	return m, nil
}
