package jobqueue

import (
	"bytes"
	"errors"
	"io"
	"os"
)

// oomSignatures are lines CUDA, PyTorch, TensorFlow and JAX print when a
// GPU allocation fails, matched case-insensitively. Only GPU memory counts:
// a host out-of-memory ending (the kernel's "Out of memory: Killed
// process", Java's "java.lang.OutOfMemoryError", Python's MemoryError) is
// not one, since a larger VRAM declaration would not help it.
var oomSignatures = [][]byte{
	[]byte("cuda out of memory"),                // PyTorch: "torch.cuda.OutOfMemoryError: CUDA out of memory."
	[]byte("torch.outofmemoryerror"),            // newer PyTorch
	[]byte("torch.cuda.outofmemoryerror"),       // older PyTorch
	[]byte("cuda error: out of memory"),         // "RuntimeError: CUDA error: out of memory" (cudaGetErrorString)
	[]byte("cuda_error_out_of_memory"),          // driver API
	[]byte("cudaerrormemoryallocation"),         // runtime API
	[]byte("out of memory on device"),           // cuDNN/cuBLAS wrappers
	[]byte("resource_exhausted: out of memory"), // JAX/XLA
	[]byte("oom when allocating tensor"),        // TensorFlow
}

// OOMTailBytes is how much of a log's end is searched for an out-of-memory
// error.
const OOMTailBytes = 64 << 10

// IsOOM reports whether text holds an out-of-memory signature.
func IsOOM(text []byte) bool {
	lower := bytes.ToLower(text)
	for _, sig := range oomSignatures {
		if bytes.Contains(lower, sig) {
			return true
		}
	}
	return false
}

// LogEndsInOOM reports whether the last OOMTailBytes of the log at path
// hold an out-of-memory signature; a missing log holds none.
func LogEndsInOOM(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	off := max(fi.Size()-OOMTailBytes, 0)
	buf := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	return IsOOM(buf), nil
}

// RaisedDeclaration is the declaration after an out-of-memory attempt:
// 1.25 x the larger of its peak and its declaration, in whole MiB.
func RaisedDeclaration(declared, peak uint64) uint64 {
	m := max(declared, peak)
	return (m*5 + 3) / 4
}
