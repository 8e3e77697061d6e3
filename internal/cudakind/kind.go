package cudakind

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// Limits of a read: the maps of a large PyTorch process run to a few
// thousand lines; a line is at most a path (PATH_MAX) and its fields.
const (
	maxMaps = 16 << 20
	maxLine = 8 << 10
)

// Kind is what a process's memory map shows of its CUDA use.
type Kind struct {
	// NCCL: the process loaded NCCL (a libnccl*.so* is mapped). PyTorch
	// loads it into every CUDA process, used or not, so this alone
	// refuses nothing.
	NCCL bool
	// NCCLShared: the process maps an NCCL shared-memory segment
	// (/dev/shm/nccl-*), which NCCL creates for a communicator with ranks
	// in other processes on this host (NCCL src/misc/shmutils.cc,
	// ncclShmOpen; its proxy's op pool, src/proxy.cc). Even unlinked, the
	// segment stays in the map, named "(deleted)".
	NCCLShared bool
	// UVM: the process maps the UVM device. A managed allocation
	// (cudaMallocManaged) is an mmap of /dev/nvidia-uvm at its own address
	// (open-gpu-kernel-modules, kernel-open/nvidia-uvm/uvm.c, uvm_mmap;
	// google/gvisor#10331 traces one), but the CUDA driver may map the
	// device in every process too, so this refuses nothing: it only
	// explains a failed checkpoint.
	UVM bool
}

// Unsupported says why NVIDIA's checkpoint driver cannot checkpoint a
// process of kind k, one phrase each, citing the source; nil when nothing
// known stands in the way.
func (k Kind) Unsupported() []string {
	var out []string
	if k.NCCLShared {
		out = append(out, "shares NCCL memory with other processes (/dev/shm/nccl-*): cuda-checkpoint hangs on a rank of an NCCL communicator while another rank is locked, and NCCL applications are not supported (NVIDIA/cuda-checkpoint#30)")
	}
	return out
}

// Inspect reads the memory map of process pid, its first 16 MiB at most.
func Inspect(pid int) (Kind, error) {
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/maps", pid), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return Kind{}, err
	}
	defer f.Close()
	k, err := Parse(io.LimitReader(f, maxMaps))
	if err != nil {
		return Kind{}, fmt.Errorf("process %d: maps: %w", pid, err)
	}
	return k, nil
}

// Parse reads a memory map in the format of /proc/PID/maps.
func Parse(r io.Reader) (Kind, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4<<10), maxLine)
	var k Kind
	for sc.Scan() {
		p := mappedPath(sc.Text())
		base := path.Base(p)
		switch {
		case strings.HasPrefix(base, "libnccl") && strings.Contains(base, ".so"):
			k.NCCL = true
		case strings.HasPrefix(p, "/dev/shm/nccl-"):
			k.NCCLShared = true
		case base == "nvidia-uvm":
			k.UVM = true
		}
	}
	return k, sc.Err()
}

// mappedPath returns the path of one maps line ("" for an anonymous
// mapping), without the " (deleted)" of an unlinked file. The path is the
// sixth field and runs to the end of the line (it may hold spaces).
func mappedPath(line string) string {
	rest := line
	for range 5 {
		rest = strings.TrimLeft(rest, " ")
		i := strings.IndexByte(rest, ' ')
		if i < 0 {
			return ""
		}
		rest = rest[i:]
	}
	p := strings.TrimSpace(rest)
	return strings.TrimSuffix(p, " (deleted)")
}
