package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The environment of an NVIDIA MPS client, as the daemon sets it for a
// process started with MPS attributes.
const (
	envMPSThreads  = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	envMPSMemLimit = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
)

// mpsThreads reads CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: 0 when unset.
func mpsThreads() (int, error) {
	s, ok := os.LookupEnv(envMPSThreads)
	if !ok || s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > 100 {
		return 0, fmt.Errorf("%s=%q: want a percentage, 1 to 100", envMPSThreads, s)
	}
	return n, nil
}

// parseMemLimits reads a CUDA_MPS_PINNED_DEVICE_MEM_LIMIT value: a
// comma-separated list of ORDINAL=SIZE, where ORDINAL is a CUDA device
// ordinal (a position in CUDA_VISIBLE_DEVICES) and SIZE a number with a
// unit, K, M, G or T (optionally followed by B), as in "0=1G,1=512MB".
// It returns MiB by ordinal, rounded down.
func parseMemLimits(s string) (map[int]uint64, error) {
	out := map[int]uint64{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		ord, size, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want ORDINAL=SIZE, such as 0=8G", item)
		}
		n, err := strconv.Atoi(strings.TrimSpace(ord))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q: device ordinal %q is not a number, 0 or more", item, ord)
		}
		if _, dup := out[n]; dup {
			return nil, fmt.Errorf("%q: device %d is given twice", item, n)
		}
		mib, err := parseLimitSize(strings.TrimSpace(size))
		if err != nil {
			return nil, fmt.Errorf("%q: %w", item, err)
		}
		out[n] = mib
	}
	return out, nil
}

// parseLimitSize reads "8G", "512MB" or "1T" as MiB.
func parseLimitSize(s string) (uint64, error) {
	upper := strings.ToUpper(s)
	digits := strings.TrimRight(upper, "KMGTB")
	unit := strings.TrimSuffix(upper[len(digits):], "B")
	var shift uint
	switch unit {
	case "K":
		shift = 10
	case "M":
		shift = 20
	case "G":
		shift = 30
	case "T":
		shift = 40
	default:
		return 0, fmt.Errorf("size %q: want a number with a unit, K, M, G or T (such as 8G or 512M)", s)
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %q is not a whole number", s, digits)
	}
	if n > (1<<63)>>shift {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	mib := n << shift >> 20
	if mib == 0 {
		return 0, fmt.Errorf("size %q is below 1 MiB", s)
	}
	return mib, nil
}

// applyMPS reports the MPS client settings of the environment and, with
// --vram, registers its memory limits on the visible GPUs before anything
// is allocated, as an MPS server enforces them.
func (j *job) applyMPS() error {
	threads, err := mpsThreads()
	if err != nil {
		return err
	}
	if threads > 0 {
		j.printf("simjob: mps threads=%d", threads)
	}
	s, ok := os.LookupEnv(envMPSMemLimit)
	if !ok || strings.TrimSpace(s) == "" {
		return nil
	}
	limits, err := parseMemLimits(s)
	if err != nil {
		return fmt.Errorf("%s: %w", envMPSMemLimit, err)
	}
	if j.vram == nil {
		return nil
	}
	for ord := range limits {
		if ord >= len(j.vram.devs) {
			return fmt.Errorf("%s=%q: device %d is not visible (%s lists %d)", envMPSMemLimit, s, ord, envVisible, len(j.vram.devs))
		}
	}
	j.vram.limits = map[string]uint64{}
	for ord, d := range j.vram.devs {
		if mib, ok := limits[ord]; ok {
			j.vram.limits[d.UUID] = mib
		}
	}
	if err := j.vram.applyLimits(); err != nil {
		return fmt.Errorf("%s: %w", envMPSMemLimit, err)
	}
	for ord, d := range j.vram.devs {
		if mib, ok := limits[ord]; ok {
			j.printf("simjob: mps mem limit %d MiB on %s", mib, d.UUID)
		}
	}
	return nil
}

// applyLimits registers the MPS memory limits unless they are in place.
func (v *vram) applyLimits() error {
	if v.limited || len(v.limits) == 0 {
		return nil
	}
	for _, d := range v.devs {
		if mib, ok := v.limits[d.UUID]; ok {
			if err := v.reg.SetLimit(v.pid, v.start, d.UUID, mib); err != nil {
				return err
			}
		}
	}
	v.limited = true
	return nil
}
