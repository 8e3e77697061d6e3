package jobqueue_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/jobqueue"
)

// oomLines are GPU out-of-memory endings as the frameworks print them.
var oomLines = []struct{ name, line string }{
	{"pytorch", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.15 GiB total capacity; 77.93 GiB already allocated; 3.31 MiB free; 78.50 GiB reserved in total by PyTorch)"},
	{"pytorch older", "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"},
	{"pytorch class alone", "torch.OutOfMemoryError"},
	{"pytorch older class alone", "torch.cuda.OutOfMemoryError"},
	{"pytorch runtime error", "RuntimeError: CUDA error: out of memory"},
	{"pytorch runtime error hint", "RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other API call"},
	{"cuda driver", "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY"},
	{"cuda runtime", "cudaMalloc returned cudaErrorMemoryAllocation (2)"},
	{"cuda sample check", "CUDA error at main.cu:42 code=2(cudaErrorMemoryAllocation) \"cudaMalloc(&d, n)\""},
	{"device wrapper", "RuntimeError: out of memory on device 0"},
	{"jax", "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes."},
	{"tensorflow", "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[8192,8192] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc"},
	{"upper case", "CUDA OUT OF MEMORY"},
	{"simjob", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 100 MiB. (simulated by gpusched-simjob --oom-once)"},
}

// notOOMLines must not count as a GPU out-of-memory ending. A host (CPU
// RAM) out-of-memory ending is deliberately not one: the daemon answers an
// OOM by retrying with a raised VRAM declaration, which cannot help a job
// the kernel or a runtime killed for host memory.
var notOOMLines = []struct{ name, line string }{
	{"empty", ""},
	{"kernel oom killer", "Out of memory: Killed process 4242 (python) total-vm:123456kB, anon-rss:98765kB"},
	{"host oom", "host out of memory: killed process"},
	{"cgroup oom", "Memory cgroup out of memory: Killed process 4242 (python)"},
	{"java heap", "Exception in thread \"main\" java.lang.OutOfMemoryError: Java heap space"},
	{"python MemoryError", "MemoryError: Unable to allocate 8.00 GiB for an array with shape (1073741824,) and data type float64"},
	{"bad_alloc", "terminate called after throwing an instance of 'std::bad_alloc'"},
	{"enomem", "fork: Cannot allocate memory"},
	{"memory usage", "memory usage 3 GiB"},
	{"progress", "epoch 3: loss 0.12, gpu mem 71.2 GiB of 80 GiB"},
	{"other cuda error", "RuntimeError: CUDA error: device-side assert triggered"},
	{"split over lines", "CUDA out of\nmemory"},
}

func TestIsOOM(t *testing.T) {
	for _, tc := range oomLines {
		t.Run("oom/"+tc.name, func(t *testing.T) {
			if !jobqueue.IsOOM([]byte(tc.line)) {
				t.Errorf("IsOOM(%q) = false", tc.line)
			}
			// Anywhere in a log: after other output and before more.
			log := "loading data\nstep 1\n" + tc.line + "\nexiting\n"
			if !jobqueue.IsOOM([]byte(log)) {
				t.Errorf("IsOOM misses %q inside a log", tc.line)
			}
		})
	}
	for _, tc := range notOOMLines {
		t.Run("not/"+tc.name, func(t *testing.T) {
			if jobqueue.IsOOM([]byte(tc.line)) {
				t.Errorf("IsOOM(%q) = true", tc.line)
			}
		})
	}
}

func TestLogEndsInOOM(t *testing.T) {
	// Without its first byte this is no signature, so the tail's start
	// can be placed exactly.
	const sig = "CUDA out of memory.\n"
	filler := func(n int) string { // n bytes of ordinary lines
		line := strings.Repeat("x", 63) + "\n"
		s := strings.Repeat(line, n/len(line)+1)
		return s[:n]
	}
	cases := []struct {
		name string
		log  *string // nil: no file
		want bool
	}{
		{name: "missing file", log: nil, want: false},
		{name: "empty", log: ptr(""), want: false},
		{name: "only output", log: ptr(filler(3 * jobqueue.OOMTailBytes)), want: false},
		{name: "oom last", log: ptr(filler(3*jobqueue.OOMTailBytes) + sig), want: true},
		{name: "short log with oom", log: ptr("start\n" + sig + "bye\n"), want: true},
		{name: "oom then output within the tail", log: ptr(filler(jobqueue.OOMTailBytes) + sig + filler(jobqueue.OOMTailBytes-len(sig)-1)), want: true},
		{name: "oom at the tail's very start", log: ptr(filler(100) + sig + filler(jobqueue.OOMTailBytes-len(sig))), want: true},
		{name: "oom cut by the tail's start", log: ptr(filler(100) + sig + filler(jobqueue.OOMTailBytes-len(sig)+1)), want: false},
		{name: "oom then more than the tail", log: ptr(sig + filler(jobqueue.OOMTailBytes+1)), want: false},
		{name: "oom long before", log: ptr(sig + filler(5*jobqueue.OOMTailBytes)), want: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "job.log")
			if tc.log != nil {
				writeFile(t, path, *tc.log)
			}
			got, err := jobqueue.LogEndsInOOM(path)
			if err != nil || got != tc.want {
				t.Errorf("LogEndsInOOM = %v, %v; want %v, nil", got, err, tc.want)
			}
		})
	}
}

func TestRaisedDeclaration(t *testing.T) {
	cases := []struct {
		declared, peak, want uint64
	}{
		{4096, 0, 5120},
		{4096, 6000, 7500},
		{0, 1001, 1252}, // 1251.25 rounds up
		{0, 0, 0},
		{1, 0, 2}, // 1.25
		{0, 2, 3}, // 2.5
		{0, 3, 4}, // 3.75
		{4, 4, 5},
		{8000, 8000, 10000},
		{1000, 1001, 1252},
		{6000, 4096, 7500},
		{80 << 10, 1, 100 << 10},
	}
	for _, tc := range cases {
		got := jobqueue.RaisedDeclaration(tc.declared, tc.peak)
		if got != tc.want {
			t.Errorf("RaisedDeclaration(%d, %d) = %d, want %d", tc.declared, tc.peak, got, tc.want)
		}
		// Always at least 1.25 x the larger, and less than 1 MiB above it.
		if m := max(tc.declared, tc.peak); got*4 < m*5 || (got-1)*4 >= m*5 && m > 0 {
			t.Errorf("RaisedDeclaration(%d, %d) = %d is not 1.25 x %d rounded up", tc.declared, tc.peak, got, m)
		}
	}
}

func FuzzIsOOM(f *testing.F) {
	for _, tc := range oomLines {
		f.Add([]byte(tc.line))
	}
	for _, tc := range notOOMLines {
		f.Add([]byte(tc.line))
	}
	f.Add([]byte("\xff\xfeCUDA\x00 out of memory"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got := jobqueue.IsOOM(b)
		// A signature stays one whatever surrounds it.
		if got && !jobqueue.IsOOM(append(append([]byte("x\n"), b...), "\ny"...)) {
			t.Errorf("IsOOM(%q) but not with text around it", b)
		}
		line := oomLines[0].line
		if !jobqueue.IsOOM(append(append(bytes.Clone(b), line...), b...)) {
			t.Errorf("IsOOM misses %q between %q", line, b)
		}
		// For ASCII text, case does not matter.
		if isASCII(b) {
			if up, low := jobqueue.IsOOM(bytes.ToUpper(b)), jobqueue.IsOOM(bytes.ToLower(b)); up != got || low != got {
				t.Errorf("IsOOM(%q) = %v, upper %v, lower %v", b, got, up, low)
			}
		}
	})
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

func TestLogEndsInOOMUnreadable(t *testing.T) {
	// A directory opens but does not read: an error, not "no OOM".
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), bytes.Repeat([]byte("x"), 10), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() == 0 {
		t.Skip("this filesystem reports directories as empty")
	}
	if _, err := jobqueue.LogEndsInOOM(dir); err == nil {
		t.Error("LogEndsInOOM of a directory gave no error")
	}
}
