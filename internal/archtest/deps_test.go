package archtest

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/testutil"
)

const mod = "github.com/gpusched/gpusched/"

type pkg struct {
	ImportPath string
	Name       string
	Doc        string
	Imports    []string
	GoFiles    []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func short(path string) string { return strings.TrimPrefix(path, mod) }

func internalImports(p pkg) []string {
	var out []string
	for _, i := range p.Imports {
		if strings.HasPrefix(i, mod) {
			out = append(out, short(i))
		}
	}
	return out
}

// allowed lists, for packages that are restricted, the project packages
// they may import. Packages not listed may import anything but the banned.
var allowed = map[string][]string{
	"pkg/api":                            {},
	"internal/placement":                 {},
	"internal/procfs":                    {},
	"internal/store":                     {},
	"internal/config":                    {"pkg/api", "internal/tomlline", "internal/cpuslice", "internal/cpuaffinity", "internal/rtprio"},
	"internal/tomlline":                  {},
	"internal/logfile":                   {},
	"internal/simgpu":                    {"internal/procfs", "internal/store", "internal/cgroup"},
	"internal/proctable":                 {"internal/store", "pkg/api", "internal/rlimit", "internal/oomscore", "internal/listing", "internal/cpuaffinity"},
	"internal/gpu":                       {"internal/simgpu", "pkg/api"},
	"internal/sandbox":                   {"internal/procfs", "internal/logfile", "internal/rlimit", "internal/oomscore", "internal/cpuaffinity"},
	"internal/rlimit":                    {"internal/procfs"},
	"internal/oomscore":                  {"internal/procfs"},
	"internal/checkpoint":                {"internal/procfs", "internal/store", "pkg/api", "internal/simgpu", "internal/execx", "internal/criuimg", "internal/cgroup", "internal/cpuaffinity", "internal/oomscore", "internal/treesockets"},
	"internal/execx":                     {"internal/cpuaffinity"},
	"internal/mps":                       {"internal/execx"},
	"internal/mps/mpstest":               {},
	"internal/cgroup":                    {},
	"internal/limits":                    {},
	"internal/retention":                 {"internal/fairshare"},
	"internal/logbudget":                 {"internal/logfile", "internal/fairshare"},
	"internal/fairshare":                 {},
	"internal/ramtier":                   {"internal/fairshare", "internal/limits"},
	"internal/thawqueue":                 {},
	"internal/netguard":                  {},
	"internal/sockdiag":                  {},
	"internal/tcpadmit":                  {"internal/limits", "internal/netguard", "internal/sockdiag"},
	"internal/backoff":                   {},
	"internal/cpuslice":                  {"internal/procfs"},
	"internal/rtprio":                    {"internal/procfs", "internal/cpuslice"},
	"internal/cpuaffinity":               {"internal/procfs"},
	"internal/bulkgate":                  {},
	"internal/memlimit":                  {},
	"internal/listing":                   {},
	"internal/cudakind":                  {},
	"internal/checkpoint/checkpointtest": {},
	"internal/memfill":                   {"internal/procfs", "internal/simgpu", "internal/cpuaffinity"},
	"internal/lazypages":                 {"internal/criuimg", "internal/cgroup", "internal/procfs", "internal/cpuaffinity"},
	"internal/logreply":                  {"internal/logfile"},
	"internal/logreader":                 {"internal/logfile", "internal/logreply", "internal/procfs", "internal/cgroup", "internal/cpuaffinity"},
	"internal/criuimg":                   {},
	"internal/checkpoint/checkpointtest/cuda-checkpoint": {"internal/simgpu", "internal/procfs", "internal/checkpoint", "internal/checkpoint/checkpointtest"},
	"internal/cli":        {"pkg/api"},
	"internal/router":     {"pkg/api", "internal/tomlline", "internal/limits", "internal/tcpadmit"},
	"cmd/gpusched-router": {"internal/router"},
	"cmd/gpuschedctl":     {"internal/cli"},
	"cmd/gpuschedd":       {"internal/checkpoint", "internal/config", "internal/daemon", "internal/lazypages", "internal/logreader", "internal/memfill", "internal/sandbox"},
	"cmd/gpusched-simjob": {"internal/procfs", "internal/simgpu"},
	"cmd/gpusched-init":   {"internal/logreader", "internal/sandbox"},
}

func TestImportRules(t *testing.T) {
	for _, p := range listPackages(t) {
		name := short(p.ImportPath)
		for _, imp := range internalImports(p) {
			if imp == "internal/daemon" && name != "cmd/gpuschedd" {
				t.Errorf("%s imports internal/daemon: only cmd/gpuschedd may", name)
			}
			if imp == "internal/testutil" {
				t.Errorf("%s imports internal/testutil outside its tests", name)
			}
			if strings.HasSuffix(imp, "test") && !strings.HasPrefix(name, imp+"/") {
				t.Errorf("%s imports the test fakes %s outside its tests", name, imp)
			}
			if ok, restricted := allowed[name]; restricted && !contains(ok, imp) {
				t.Errorf("%s may not import %s (allowed: %v)", name, imp, ok)
			}
		}
		if name == "internal/cgroup" {
			for _, imp := range p.Imports {
				if strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") && !strings.HasPrefix(imp, "golang.org/x/sys/") {
					t.Errorf("%s may use only the standard library and golang.org/x/sys, imports %s", name, imp)
				}
			}
		}
		if name == "pkg/api" || name == "internal/placement" {
			for _, imp := range p.Imports {
				if strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") {
					t.Errorf("%s must use only the standard library, imports %s", name, imp)
				}
			}
		}
	}
}

func TestEveryPackageHasDoc(t *testing.T) {
	for _, p := range listPackages(t) {
		if len(p.GoFiles) > 0 && strings.TrimSpace(p.Doc) == "" {
			t.Errorf("%s has no package doc comment", short(p.ImportPath))
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
