package checkpoint

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// pluginsEntry encodes an inventory's plugins_entry naming plugins, after
// a dump_criu_run_id field (13) that must survive untouched.
func pluginsEntry(plugins ...string) []byte {
	var entry []byte
	for _, p := range plugins {
		entry = protowire.AppendString(protowire.AppendTag(entry, pluginsEntryPlugins, protowire.BytesType), p)
	}
	raw := protowire.AppendString(protowire.AppendTag(nil, 13, protowire.BytesType), "run-id")
	return protowire.AppendBytes(protowire.AppendTag(raw, inventoryPluginsEntry, protowire.BytesType), entry)
}

func TestDropPluginDropsOnlyCUDAPlugin(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in, out []byte
		changed bool
	}{
		{"cuda only", pluginsEntry(cudaPluginName), pluginsEntry(), true},
		{"with another", pluginsEntry("amdgpu_plugin", cudaPluginName), pluginsEntry("amdgpu_plugin"), true},
		{"another only", pluginsEntry("amdgpu_plugin"), pluginsEntry("amdgpu_plugin"), false},
		{"none", pluginsEntry(), pluginsEntry(), false},
		{"no entry", nil, nil, false},
		{"malformed", []byte{0x62, 0x7f, 'x'}, []byte{0x62, 0x7f, 'x'}, false},
	} {
		got, changed := dropPlugin(tc.in)
		if changed != tc.changed || !bytes.Equal(got, tc.out) {
			t.Errorf("%s: dropPlugin = %x, %v; want %x, %v", tc.name, got, changed, tc.out, tc.changed)
		}
	}
}
