package router

import (
	"strconv"
	"strings"
)

// maxSlots bounds a model's slots setting.
const maxSlots = 65536

// slotFlags are the flags by which model servers are told how many
// requests they process at once: llama-server's -np/--parallel (its
// "number of server slots"; -1, its default in recent versions, picks a
// number itself) and vLLM's --max-num-seqs (sequences per iteration).
// Requests past them wait in the server's own queue, first come, first
// served: llama-server defers them (tools/server server_queue::defer, then
// pop_deferred_task as a slot frees) and vLLM's scheduler keeps them
// waiting in arrival order under its default "fcfs" policy.
var slotFlags = []string{"-np", "--parallel", "--max-num-seqs"}

// serverSlots is the number of slots a model server's argv gives it, or 0
// where it names none (or leaves the number to the server).
func serverSlots(argv []string) int {
	n := 0
	for i, a := range argv {
		for _, f := range slotFlags {
			v, ok := strings.CutPrefix(a, f+"=")
			if a == f && i+1 < len(argv) {
				v, ok = argv[i+1], true
			}
			if !ok {
				continue
			}
			if k, err := strconv.Atoi(v); err == nil && k > 0 && k <= maxSlots {
				n = k // the last one given, as both servers read it
			} else {
				n = 0
			}
		}
	}
	return n
}
