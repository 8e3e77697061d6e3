package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpusched/gpusched/internal/checkpoint/checkpointtest"
)

const usageLine = "usage: cuda-checkpoint [--get-state | --action <lock|checkpoint|restore|unlock> | --get-restore-tid | --toggle] --pid <pid> [--timeout <ms>] [--device-map <old=new,...>] | --help\n"

// The tool's --help comes from the driver library, so it is the driver's:
// 550's as NVIDIA/cuda-checkpoint's first README shows it, 570's as its
// "570 Features" README shows it, 580's as issues #18, #35 and #46 quote it.
const (
	help550 = `CUDA checkpoint and restore utility.
Toggles the state of CUDA within a process between suspended and running.
Version 550.54.09. Copyright (C) 2024 NVIDIA Corporation. All rights reserved.

    --toggle --pid <value>
        Toggle the state of CUDA in the specified process.

    --help
        Print help message.

`
	help570 = `CUDA checkpoint and restore utility.
Version 570.86.10. Copyright (C) 2025 NVIDIA Corporation. All rights reserved.

Operations:
--get-state --pid <pid>
        Prints the current checkpoint state of the process specified by <pid>

--action lock | checkpoint | restore | unlock --pid <pid> [--timeout <ms>]
        Performs the specified action on <pid>.
        For the lock action a timeout can be provided, the lock operation will wait up to <ms> milliseconds for the operation to succeed.

--toggle --pid <pid>
        Toggles the CUDA state in the specified process between the running and checkpointed states

--get-restore-tid --pid <pid>
        Retrieves the CUDA restore thread ID of the process specified by <pid>

Options:
--pid|-p <pid>
        The pid upon which to perform the operation

--timeout|-t <timeout>
        Optional timeout that can be specified for the lock action in milliseconds

--help|-h
        Print this help message
`
	help580 = "CUDA checkpoint and restore utility.\n" +
		"Version 580.65.06. Copyright (C) 2025 NVIDIA Corporation. All rights reserved.\n\n" +
		"Operations:\n" +
		"--get-state --pid <pid>\n" +
		"\tPrints the current checkpoint state of the process specified by <pid>\n\n" +
		"--action lock | checkpoint | restore | unlock --pid <pid> [--timeout <ms>] [--device-map <uuids>]\n" +
		"\tPerforms the specified action on <pid>.\n" +
		"\tFor the lock action a timeout can be provided, the lock operation will wait up to <ms> milliseconds for the operation to succeed.\n" +
		"\tFor the restore action a device map can be provided in the format oldUuid=newUuid,oldUuid=newUuid,... which will be used to remap old devices to new devices.\n\n" +
		"--toggle --pid <pid>\n" +
		"\tToggles the CUDA state in the specified process between the running and checkpointed states\n\n" +
		"--get-restore-tid --pid <pid>\n" +
		"\tRetrieves the CUDA restore thread ID of the process specified by <pid>\n\n" +
		"Options:\n" +
		"--pid|-p <pid>\n" +
		"\tThe pid upon which to perform the operation\n\n" +
		"--timeout|-t <timeout>\n" +
		"\tOptional timeout that can be specified for the lock action in milliseconds\n\n" +
		"--device-map|-d <deviceUuids>\n" +
		"\tOptional device map used during the restore action to manually remap old devices onto new ones.\n" +
		"\t<deviceUuids> is a comma delimited list in the format oldUuid1=newUuid1,oldUuid2=newUuid2,...\n" +
		"\tMust contain all checkpointed devices if specified.\n\n" +
		"--help|-h\n" +
		"\tPrint this help message\n"
)

// helpText is the --help output of the driver the help fault picks.
func helpText(f checkpointtest.Fault) string {
	switch {
	case f.NoAction:
		return help550
	case f.NoDeviceMap:
		return help570
	}
	return help580
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
		case name == "--pid" || name == "-p":
			inv.pid, err = intValue(value)
		case name == "--timeout" || name == "-t":
			inv.timeoutMS, err = intValue(value)
		case (name == "--device-map" || name == "-d") && !help.NoDeviceMap:
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
