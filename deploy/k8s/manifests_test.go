// Package k8s_test checks the Kubernetes manifests in this directory by
// decoding them strictly into the real Kubernetes API types, then asserting
// what gpuschedd needs from them.
//
//	cd deploy/k8s && go test -count=1 ./...
package k8s_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// hostDirs are the daemon's host directories: the socket's, the state
// (records, queue, snapshots) and the per-process logs. Each must be a
// hostPath mounted at the same path inside the container, so that paths
// the daemon records (log files, snapshot directories) mean the same on the
// host, in the next pod and in CRIU images.
var hostDirs = []string{"/run/gpusched", "/var/lib/gpusched", "/var/log/gpusched"}

// object is one decoded manifest document.
type object struct {
	file string
	doc  int // 1-based index of the document in its file
	obj  any // *corev1.Namespace, *appsv1.DaemonSet or *corev1.Pod
}

func (o object) String() string { return fmt.Sprintf("%s document %d", o.file, o.doc) }

// kinds maps apiVersion/kind to a constructor of the API type it decodes
// into. A manifest of any other kind fails the test.
var kinds = map[string]func() any{
	"v1/Namespace":      func() any { return &corev1.Namespace{} },
	"apps/v1/DaemonSet": func() any { return &appsv1.DaemonSet{} },
	"v1/Pod":            func() any { return &corev1.Pod{} },
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// splitDocuments splits a multi-document YAML stream on its "---" lines
// and drops documents that hold nothing but comments and blank lines.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range docSeparator.Split(string(data), -1) {
		empty := true
		for _, line := range strings.Split(d, "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
				empty = false
				break
			}
		}
		if !empty {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

// decode decodes one document strictly, as the API server's strict field
// validation does: its apiVersion and kind choose the type, and an unknown
// field, a field whose case differs from the API's (hostPid for hostPID),
// a duplicate field or a value of the wrong type is an error.
// sigs.k8s.io/yaml's UnmarshalStrict alone would accept a case-mismatched
// field (encoding/json matches names without case), so the YAML is turned
// into JSON (duplicates refused) and decoded by sigs.k8s.io/json, the API
// machinery's case-sensitive decoder.
func decode(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, fmt.Errorf("read apiVersion and kind: %w", err)
	}
	key := tm.APIVersion + "/" + tm.Kind
	newObj, ok := kinds[key]
	if !ok {
		return nil, fmt.Errorf("unknown kind %q (apiVersion %q): add its type to kinds and its checks to this test", tm.Kind, tm.APIVersion)
	}
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	obj := newObj()
	strictErrs, err := sigsjson.UnmarshalStrict(j, obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if len(strictErrs) > 0 {
		return nil, fmt.Errorf("%s: %w", key, errors.Join(strictErrs...))
	}
	return obj, nil
}

// loadManifests decodes every document of every *.yaml file here.
func loadManifests(t *testing.T) []object {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no *.yaml manifests in deploy/k8s")
	}
	var objs []object
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs := splitDocuments(data)
		if len(docs) == 0 {
			t.Errorf("%s: no documents", f)
		}
		for i, d := range docs {
			o, err := decode(d)
			if err != nil {
				t.Errorf("%s document %d: %v", f, i+1, err)
				continue
			}
			objs = append(objs, object{file: f, doc: i + 1, obj: o})
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return objs
}

// TestDecoderIsStrict makes sure the decoding above would catch what it is
// there to catch: a misspelt field, a field at the wrong level, a value of
// the wrong type and an unknown kind.
func TestDecoderIsStrict(t *testing.T) {
	bad := map[string]string{
		"misspelt field": "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: x\nspec:\n  template:\n    spec:\n      hostPIDs: true\n",
		"field case":     "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: x\nspec:\n  template:\n    spec:\n      hostPid: true\n",
		"wrong level":    "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: x\nspec:\n  hostPID: true\n",
		"wrong type":     "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  hostPID: \"yes\"\n",
		"duplicate":      "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n  name: y\n",
		"unknown kind":   "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\n",
		"no kind":        "metadata:\n  name: x\n",
	}
	for what, doc := range bad {
		if _, err := decode([]byte(doc)); err == nil {
			t.Errorf("%s: decoded without an error:\n%s", what, doc)
		}
	}
	if _, err := decode([]byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n")); err != nil {
		t.Errorf("a valid Namespace: %v", err)
	}
	docs := splitDocuments([]byte("# only a comment\n---\na: 1\n---\n\n---  \nb: 2\n"))
	if len(docs) != 2 {
		t.Errorf("splitDocuments found %d documents, want 2: %q", len(docs), docs)
	}
}

func TestManifests(t *testing.T) {
	objs := loadManifests(t)
	var namespaces []string
	var daemonSets, pods []object
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *corev1.Namespace:
			namespaces = append(namespaces, v.Name)
		case *appsv1.DaemonSet:
			daemonSets = append(daemonSets, o)
		case *corev1.Pod:
			pods = append(pods, o)
		}
	}
	if !slices.Contains(namespaces, "gpusched") {
		t.Errorf("no Namespace gpusched (have %v)", namespaces)
	}
	if len(daemonSets) != 1 {
		t.Fatalf("want exactly one DaemonSet, have %d", len(daemonSets))
	}
	checkDaemonSet(t, daemonSets[0], namespaces)
	if len(pods) == 0 {
		t.Error("no example client Pod")
	}
	for _, o := range pods {
		checkClientPod(t, o)
	}
}

func checkDaemonSet(t *testing.T, o object, namespaces []string) {
	ds := o.obj.(*appsv1.DaemonSet)
	errorf := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s (DaemonSet %s): %s", o, ds.Name, fmt.Sprintf(format, args...))
	}
	if !slices.Contains(namespaces, ds.Namespace) {
		errorf("namespace %q is not created by the manifests (%v)", ds.Namespace, namespaces)
	}

	// The selector selects the pods the template makes, and is not empty
	// (an empty selector would select every pod of the namespace).
	if ds.Spec.Selector == nil || len(ds.Spec.Selector.MatchLabels)+len(ds.Spec.Selector.MatchExpressions) == 0 {
		errorf("no selector")
	} else if sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector); err != nil {
		errorf("selector: %v", err)
	} else if !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		errorf("selector %s does not match the template's labels %v", sel, ds.Spec.Template.Labels)
	}

	// Rolling update one node at a time, never two daemons on a node.
	us := ds.Spec.UpdateStrategy
	if us.Type != appsv1.RollingUpdateDaemonSetStrategyType || us.RollingUpdate == nil {
		errorf("updateStrategy %+v, want RollingUpdate", us)
	} else {
		if mu := us.RollingUpdate.MaxUnavailable; mu == nil || *mu != intstr.FromInt32(1) {
			errorf("rollingUpdate.maxUnavailable %v, want 1", mu)
		}
		if ms := us.RollingUpdate.MaxSurge; ms != nil && ms.IntValue() != 0 {
			errorf("rollingUpdate.maxSurge %v: two daemons cannot share a node's socket and state", ms)
		}
	}

	spec := ds.Spec.Template.Spec
	if !spec.HostPID {
		errorf("hostPID is not true: NVML's pids, the per-tree PID namespaces and CRIU need the host's")
	}
	if spec.RuntimeClassName == nil || *spec.RuntimeClassName != "nvidia" {
		errorf("runtimeClassName %v, want nvidia", spec.RuntimeClassName)
	}
	if spec.NodeSelector["nvidia.com/gpu.present"] != "true" {
		errorf("nodeSelector %v lacks nvidia.com/gpu.present=true", spec.NodeSelector)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool { return tol.Key == "nvidia.com/gpu" }) {
		errorf("no toleration of the nvidia.com/gpu taint")
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g <= 0 {
		errorf("terminationGracePeriodSeconds %v, want it set", g)
	}

	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	if len(spec.Containers) != 1 {
		errorf("want one container, have %d", len(spec.Containers))
		return
	}
	c := spec.Containers[0]
	cerrorf := func(format string, args ...any) {
		t.Helper()
		errorf("container %s: %s", c.Name, fmt.Sprintf(format, args...))
	}
	if c.Image == "" {
		cerrorf("no image")
	}
	if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		cerrorf("not privileged")
	}
	if len(c.Command) == 0 || filepath.Base(c.Command[0]) != "gpuschedd" {
		cerrorf("command %q does not start gpuschedd", c.Command)
	}
	if i := slices.Index(c.Args, "--group"); i < 0 || i+1 >= len(c.Args) || c.Args[i+1] == "" {
		cerrorf("args %q name no --group for the socket", c.Args)
	}
	for _, a := range c.Args {
		for _, flag := range []string{"--socket", "--state-dir", "--log-dir", "--snapshot-dir"} {
			if a == flag || strings.HasPrefix(a, flag+"=") {
				cerrorf("args override %s: keep the defaults, which the host paths mount", flag)
			}
		}
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["NVIDIA_VISIBLE_DEVICES"] != "all" {
		cerrorf("NVIDIA_VISIBLE_DEVICES=%q, want all", env["NVIDIA_VISIBLE_DEVICES"])
	}
	caps := strings.Split(env["NVIDIA_DRIVER_CAPABILITIES"], ",")
	for _, want := range []string{"compute", "utility"} {
		if !slices.Contains(caps, want) && !slices.Contains(caps, "all") {
			cerrorf("NVIDIA_DRIVER_CAPABILITIES=%q lacks %s", env["NVIDIA_DRIVER_CAPABILITIES"], want)
		}
	}

	// The three host directories, each a hostPath mounted read-write at
	// its own path.
	for _, dir := range hostDirs {
		var vol *corev1.Volume
		for _, v := range spec.Volumes {
			if v.HostPath != nil && filepath.Clean(v.HostPath.Path) == dir {
				vol = &v
				break
			}
		}
		if vol == nil {
			errorf("no hostPath volume for %s", dir)
			continue
		}
		if tp := vol.HostPath.Type; tp != nil && *tp != corev1.HostPathDirectoryOrCreate && *tp != corev1.HostPathDirectory {
			errorf("hostPath %s has type %q, want a directory", dir, *tp)
		}
		mounted := false
		for _, m := range c.VolumeMounts {
			if m.Name != vol.Name {
				continue
			}
			if filepath.Clean(m.MountPath) != dir || m.SubPath != "" {
				cerrorf("host %s is mounted at %s (subPath %q), want the same path", dir, m.MountPath, m.SubPath)
			}
			if m.ReadOnly {
				cerrorf("host %s is mounted read-only", dir)
			}
			mounted = true
		}
		if !mounted {
			cerrorf("host %s (volume %s) is not mounted", dir, vol.Name)
		}
	}
	for _, m := range c.VolumeMounts {
		if _, ok := vols[m.Name]; !ok {
			cerrorf("mount of undeclared volume %s", m.Name)
		}
	}

	// Probes that ask the daemon over its socket, not a TCP port or a
	// process list.
	for what, p := range map[string]*corev1.Probe{"readinessProbe": c.ReadinessProbe, "livenessProbe": c.LivenessProbe} {
		if p == nil {
			cerrorf("no %s", what)
			continue
		}
		if p.Exec == nil || len(p.Exec.Command) < 2 || filepath.Base(p.Exec.Command[0]) != "gpuschedctl" {
			cerrorf("%s does not exec gpuschedctl against the socket: %+v", what, p.ProbeHandler)
			continue
		}
		if !slices.ContainsFunc(p.Exec.Command[1:], func(a string) bool { return a == "version" || a == "status" }) {
			cerrorf("%s runs %q: want gpuschedctl version or status", what, p.Exec.Command)
		}
	}
	if lp := c.LivenessProbe; lp != nil && lp.FailureThreshold*max(lp.PeriodSeconds, 10) < 120 {
		cerrorf("livenessProbe gives up after %ds: a liveness restart kills every managed process, allow at least 2 minutes",
			lp.FailureThreshold*max(lp.PeriodSeconds, 10))
	}

	// Requests, and no memory limit: managed processes are charged to
	// this container's cgroup.
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			cerrorf("no %s request", r)
		}
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		cerrorf("a memory limit would OOM-kill managed processes (they share this container's cgroup)")
	}
}

// checkClientPod checks an example client: it mounts the node's socket
// directory read-only at the same path, is in a supplementary group (the
// socket's), and asks for no privilege.
func checkClientPod(t *testing.T, o object) {
	pod := o.obj.(*corev1.Pod)
	errorf := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s (Pod %s): %s", o, pod.Name, fmt.Sprintf(format, args...))
	}
	spec := pod.Spec
	if spec.HostPID {
		errorf("a client needs no host PID namespace")
	}
	if sc := spec.SecurityContext; sc == nil || len(sc.SupplementalGroups) == 0 {
		errorf("no securityContext.supplementalGroups: the socket is mode 0660 for its group")
	}
	var sockVol string
	for _, v := range spec.Volumes {
		if v.HostPath != nil && filepath.Clean(v.HostPath.Path) == "/run/gpusched" {
			sockVol = v.Name
		}
	}
	if sockVol == "" {
		errorf("no hostPath volume for /run/gpusched")
		return
	}
	for _, c := range spec.Containers {
		if sc := c.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
			errorf("container %s is privileged: a client needs no privilege", c.Name)
		}
		found := false
		for _, m := range c.VolumeMounts {
			if m.Name == sockVol {
				found = filepath.Clean(m.MountPath) == "/run/gpusched"
				if !m.ReadOnly {
					errorf("container %s mounts the socket directory read-write: a client may replace the socket", c.Name)
				}
			}
		}
		if !found {
			errorf("container %s does not mount the socket directory at /run/gpusched", c.Name)
		}
		for _, e := range c.Env {
			if e.Name == "GPUSCHED_SOCKET" && filepath.Dir(e.Value) != "/run/gpusched" {
				errorf("container %s: GPUSCHED_SOCKET=%s is outside the mounted /run/gpusched", c.Name, e.Value)
			}
		}
	}
}

// TestReadmeNamesEveryManifest keeps README.md and the files in step.
func TestReadmeNamesEveryManifest(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("*.yaml")
	for _, f := range files {
		if !bytes.Contains(readme, []byte(f)) {
			t.Errorf("README.md does not mention %s", f)
		}
	}
}
