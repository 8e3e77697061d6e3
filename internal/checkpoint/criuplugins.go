package checkpoint

import (
	"os"
	"path/filepath"
)

// noPlugins is the plugin directory every CRIU worker is given
// (--libdir): none of its plugins is loaded.
//
// CRIU dlopens every *.so file of its libdir at each dump and restore
// (criu/plugin.c, cr_plugin_init; the libdir is --libdir, else
// $CRIU_LIBS_DIR, else /usr/lib/criu/). CRIU's CUDA plugin
// (plugins/cuda/cuda_plugin.c) does at a restore what the daemon does
// itself after it: its RESUME_DEVICES_LATE hook runs "cuda-checkpoint
// --action restore" and "--action unlock" on every restored process
// (resume_device), on the GPUs it was dumped on, with no device map. The
// daemon's own restore then meets a running process (an illegal state) and
// a thaw onto other GPUs never happens. The daemon checkpoints every CUDA
// process before CRIU dumps it and restores it afterwards (the sequence of
// NVIDIA's cuda-checkpoint README, "criu dump" then "cuda-checkpoint
// --toggle"), so CRIU needs no plugin at all.
//
// The directory is the worker's own fdinfo directory: it exists in every
// process, lists only fd numbers, never a *.so, and nobody can write to
// it. --libdir on the command line wins over a libdir set in
// /etc/criu/default.conf and over $CRIU_LIBS_DIR (criu/config.c reads the
// configuration files before argv).
const noPlugins = "/proc/self/fdinfo"

// cudaPluginInstalled reports whether CRIU would load its CUDA plugin if it
// were let: cuda_plugin.so in $CRIU_LIBS_DIR or a default plugin directory.
func cudaPluginInstalled() bool {
	for _, dir := range []string{os.Getenv("CRIU_LIBS_DIR"), "/usr/lib/criu", "/usr/lib64/criu", "/usr/local/lib/criu"} {
		if dir == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "cuda_plugin.so")); err == nil {
			return true
		}
	}
	return false
}
