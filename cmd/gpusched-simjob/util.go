package main

// applyUtil registers how busy the job keeps its GPUs (--util) unless it
// is in place, so that the simulated GPUs' utilization shows it.
func (v *vram) applyUtil() error {
	if v.utilSet || v.util == 0 {
		return nil
	}
	if err := v.reg.SetUtil(v.pid, v.start, v.util); err != nil {
		return err
	}
	v.utilSet = true
	return nil
}
