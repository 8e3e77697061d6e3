package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/checkpoint-restore/go-criu/v7/crit"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/inventory"
	"google.golang.org/protobuf/encoding/protowire"
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
// (resume_device), on the GPUs it was dumped on, with no device map,
// whenever the dump recorded it (cuda_plugin_init) on a machine with a GPU
// and a cuda-checkpoint on CRIU's PATH. The daemon's own restore then
// meets a running process (an illegal state) and a thaw onto other GPUs
// never happens. A plugin built for another CRIU can also fail every
// operation (CRIU issue #2521). The daemon checkpoints every CUDA
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

// cudaPluginName is the name CRIU's CUDA plugin registers and records.
const cudaPluginName = "cuda_plugin"

// inventoryImage is the image of a dump that names the plugins its restore
// needs.
const inventoryImage = "inventory.img"

// Fields of CRIU's images/inventory.proto (CRIU 4.1) that go-criu's copy
// lacks: inventory_entry.plugins_entry, and plugins_entry.plugins in it.
const (
	inventoryPluginsEntry protowire.Number = 12
	pluginsEntryPlugins   protowire.Number = 12
)

// forgetCUDAPlugin drops CRIU's CUDA plugin from the plugins the dump in
// dir needs. A dump made while CRIU loaded the plugin (CRIU with its
// default plugin directory, as gpusched ran it before noPlugins) names it
// in its inventory when the tree had a CUDA process
// (cuda_plugin_pause_devices, add_inventory_plugin; CRIU PR #2489), and a
// CRIU without it refuses the restore: "Missing required plugin:
// cuda_plugin" (criu/image.c, check_inventory_plugins). The plugin left
// nothing else in such an image: gpusched checkpoints every CUDA process
// before a dump, and the plugin dumps a checkpointed process as it is
// (CRIU PR #2517).
func forgetCUDAPlugin(dir string) error {
	img, err := decodeImage(filepath.Join(dir, inventoryImage), &inventory.InventoryEntry{})
	if errors.Is(err, fs.ErrNotExist) {
		return nil // not an image: CRIU says so
	}
	if err != nil {
		return fmt.Errorf("inventory image: %w", err)
	}
	changed := false
	for _, e := range img.Entries {
		m := e.Message.ProtoReflect()
		if raw, ok := dropPlugin(m.GetUnknown()); ok {
			m.SetUnknown(raw)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return replaceImage(filepath.Join(dir, inventoryImage), img)
}

// dropPlugin removes cudaPluginName from the plugins_entry in raw, the
// fields of an inventory entry go-criu does not know, and reports whether
// it was there.
func dropPlugin(raw []byte) ([]byte, bool) {
	return editBytesFields(raw, inventoryPluginsEntry, func(entry []byte) ([]byte, bool, bool) {
		entry, changed := editBytesFields(entry, pluginsEntryPlugins, func(name []byte) ([]byte, bool, bool) {
			drop := string(name) == cudaPluginName
			return name, !drop, drop
		})
		return entry, true, changed
	})
}

// editBytesFields passes the value of each length-delimited field num of
// msg (protobuf wire format) to edit, which returns its new value, whether
// to keep the field and whether it changed anything; it returns the
// edited msg and whether anything changed. A malformed msg is left as it
// is, for CRIU to refuse.
func editBytesFields(msg []byte, num protowire.Number, edit func([]byte) ([]byte, bool, bool)) ([]byte, bool) {
	var out []byte
	changed := false
	for rest := msg; len(rest) > 0; {
		n, typ, size := protowire.ConsumeField(rest)
		if size < 0 {
			return msg, false
		}
		field := rest[:size]
		rest = rest[size:]
		if n != num || typ != protowire.BytesType {
			out = append(out, field...)
			continue
		}
		_, _, tagSize := protowire.ConsumeTag(field)
		val, _ := protowire.ConsumeBytes(field[tagSize:])
		val, keep, ch := edit(val)
		changed = changed || ch
		if keep {
			out = protowire.AppendBytes(protowire.AppendTag(out, num, typ), val)
		}
	}
	return out, changed
}

// replaceImage writes img over the image at path, atomically.
func replaceImage(path string, img *crit.CriuImage) error {
	tmp := path + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err == nil {
		err = crit.New(nil, out, "", false, false).Encode(img)
		if serr := out.Sync(); err == nil {
			err = serr
		}
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("image %s: %w", path, err)
	}
	return nil
}
