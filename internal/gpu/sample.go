package gpu

// Device is one GPU at sampling time.
type Device struct {
	Index       int
	UUID        string
	Name        string
	TotalMiB    uint64
	UsedMiB     uint64
	UtilPercent *int     // nil when the backend cannot measure it
	PowerWatts  *float64 // nil when the backend cannot measure it
	// PowerLimitWatts is the power management limit; nil when unknown.
	PowerLimitWatts *float64
	// TempC is the GPU core temperature in degrees C; nil when unknown.
	TempC *int
	// MIG is set when the GPU's current MIG mode is enabled: it is shared
	// out as MIG instances, not used whole.
	MIG bool
	// Err is set when the device is listed but its queries failed (for
	// example "memory info: GPU is lost"): its memory, metrics and
	// processes are then unknown (zero). A device that cannot even be
	// identified is left out of the sample.
	Err string
}

// ProcUsage is one process's memory on one device, by host pid, and how
// busy it kept the device.
type ProcUsage struct {
	PID     int
	UUID    string
	UsedMiB uint64
	// UtilPercent is the process's own utilization of the device since the
	// last sample, the highest of its SM, memory, encoder and decoder
	// figures (0..100); nil when the backend cannot tell processes apart.
	UtilPercent *int
}

// Sample is the state of all GPUs at one moment. A backend fails the whole
// sample only when it cannot list the devices at all; one device's failure
// is that device's Err, or its absence.
type Sample struct {
	Devices []Device    // sorted by index
	Procs   []ProcUsage // sorted by uuid, then pid; never nil
	Driver  string      // driver version ("sim" for simulated GPUs); "" when unknown
	// Untrusted lists, for simulated GPUs, the records the sample left out
	// because they are not the named process's own (another user wrote
	// them), each "procs/<uid>/<pid>.json: why"; only those not reported by
	// an earlier sample.
	Untrusted []string
}
