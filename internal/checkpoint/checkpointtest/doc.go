// Package checkpointtest owns the test stand-ins of the checkpoint package:
// the fake cuda-checkpoint executable (in cuda-checkpoint/, whose doc
// comment describes its grammar) and the fault-injection file it reads,
// with helpers that install the fake and its faults in a per-test
// directory. It is used only by tests and by the fake itself.
package checkpointtest
