package checkpoint

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/gpusched/gpusched/internal/cgroup"
	"github.com/gpusched/gpusched/internal/cpuaffinity"
	"github.com/gpusched/gpusched/internal/oomscore"
)

// Owner is whom a CRIU worker runs as when it dumps a tree that is not
// root's. The kernel lets prlimit(2) read another process's limits only
// with CAP_SYS_RESOURCE or the same real uid and gid (kernel/sys.c,
// check_prlimit_permission), and CRIU reads every dumped task's limits that
// way (criu/cr-dump.c, dump_task_rlimits): a root daemon without
// CAP_SYS_RESOURCE (as in many containers) can dump only trees of its own
// uid. A worker with the tree's uid and gid, every capability the daemon
// holds as ambient ones and CRIU's unprivileged mode dumps them wherever.
type Owner struct {
	UID, GID uint32
}

// maxResponse bounds one CRIU RPC message; CRIU's answers are far smaller.
const maxResponse = 64 << 10

// swrk is one CRIU worker in swrk mode (criu/cr-service.c), started the
// way runc starts it: the far end of a SOCK_SEQPACKET socketpair is its
// fd 3, further descriptors it needs (a page server's socket) follow, its
// environment is fixed (CRIU reads $HOME/.criu/default.conf and
// $CRIU_CONFIG_FILE), it loads no plugin (noPlugins), and it is the leader
// of its own process group, which a deadline kills.
type swrk struct {
	cmd *exec.Cmd
	sk  *os.File
}

// swrkFirstExtraFD is the fd number of the first extra file in the worker.
const swrkFirstExtraFD = 4

// worker is where a CRIU worker runs: as whom, in which cgroups, on which
// CPUs, at which oom_score_adj.
type worker struct {
	as          *Owner   // nil: as this process (root)
	cgroups     []string // none: in this process's cgroups
	cpus        string   // the tree's own CPUs (cpuaffinity.StartOn); "": those the daemon gives users
	oomScoreAdj *int     // nil: this process's; one below this process's floor leaves it this process's
}

func startSwrk(path string, env []string, in worker, extra []*os.File) (*swrk, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("criu socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "criu-rpc"), os.NewFile(uintptr(fds[1]), "criu-rpc-worker")
	defer theirs.Close()
	cmd := exec.Command(path, "--libdir", noPlugins, "swrk", "3")
	cmd.ExtraFiles = append([]*os.File{theirs}, extra...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if as := in.as; as != nil {
		caps, err := ownCaps()
		if err != nil {
			ours.Close()
			return nil, err
		}
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: as.UID, Gid: as.GID, Groups: []uint32{}}
		cmd.SysProcAttr.AmbientCaps = caps
	}
	if err := cpuaffinity.StartOn(in.cpus, cmd.Start); err != nil {
		ours.Close()
		return nil, fmt.Errorf("start criu swrk: %w", err)
	}
	w := &swrk{cmd: cmd, sk: ours}
	if err := in.place(cmd.Process.Pid); err != nil {
		w.kill()
		w.close()
		return nil, fmt.Errorf("criu swrk: %w", err)
	}
	return w, nil
}

// place puts the started worker pid in its cgroups and at its
// oom_score_adj, before it has its request.
func (in worker) place(pid int) error {
	if err := cgroup.Move(pid, in.cgroups...); err != nil {
		return err
	}
	if in.oomScoreAdj == nil {
		return nil
	}
	if err := oomscore.Set(pid, *in.oomScoreAdj); err != nil && !errors.Is(err, oomscore.ErrBelowFloor) {
		return err
	}
	return nil
}

// env is the whole environment of a CRIU worker run as as (nil: root):
// PATH, and for an owner's worker the kdat cache's directory.
func (c *CRIU) env(as *Owner) []string {
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if as != nil && c.ownersKdat != "" {
		env = append(env, "XDG_RUNTIME_DIR="+c.ownersKdat)
	}
	return env
}

// call sends req and returns CRIU's final answer, handing every
// notification on the way to notify (which may be nil).
func (w *swrk) call(req *rpc.CriuReq, notify func(*rpc.CriuNotify) error) (*rpc.CriuResp, error) {
	buf := make([]byte, maxResponse)
	for {
		b, err := proto.Marshal(req)
		if err != nil {
			return nil, err
		}
		if _, err := w.sk.Write(b); err != nil {
			return nil, fmt.Errorf("criu rpc: %w", err)
		}
		n, _, flags, _, err := unix.Recvmsg(int(w.sk.Fd()), buf, nil, 0)
		switch {
		case err != nil:
			return nil, fmt.Errorf("criu rpc: %w", err)
		case n == 0:
			return nil, errors.New("criu rpc: the worker closed the connection")
		case flags&unix.MSG_TRUNC != 0:
			return nil, fmt.Errorf("criu rpc: an answer larger than %d bytes", maxResponse)
		}
		resp := &rpc.CriuResp{}
		if err := proto.Unmarshal(buf[:n], resp); err != nil {
			return nil, fmt.Errorf("criu rpc: %w", err)
		}
		if !resp.GetSuccess() {
			return resp, fmt.Errorf("operation failed (msg:%s err:%d)", resp.GetCrErrmsg(), resp.GetCrErrno())
		}
		if resp.GetType() != rpc.CriuReqType_NOTIFY {
			return resp, nil
		}
		if notify != nil {
			if err := notify(resp.GetNotify()); err != nil {
				return resp, err
			}
		}
		req = &rpc.CriuReq{Type: rpc.CriuReqType_NOTIFY.Enum(), NotifySuccess: proto.Bool(true)}
	}
}

// kill ends the worker and everything it started (its process group).
func (w *swrk) kill() { _ = unix.Kill(-w.cmd.Process.Pid, unix.SIGKILL) }

// close hangs up and reaps the worker.
func (w *swrk) close() error {
	cerr := w.sk.Close()
	if err := w.cmd.Wait(); err != nil {
		return fmt.Errorf("criu swrk: %w", err)
	}
	return cerr
}

var (
	ownCapsOnce sync.Once
	ownCapsList []uintptr
	ownCapsErr  error
)

// ownCaps lists the capabilities this process holds (its permitted set),
// the ones a worker run as a tree's owner may be given.
func ownCaps() ([]uintptr, error) {
	ownCapsOnce.Do(func() {
		f, err := os.Open("/proc/self/status")
		if err != nil {
			ownCapsErr = err
			return
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			v, ok := strings.CutPrefix(sc.Text(), "CapPrm:")
			if !ok {
				continue
			}
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				ownCapsErr = fmt.Errorf("CapPrm: %w", err)
				return
			}
			for c := uintptr(0); c < 64; c++ {
				if mask&(1<<c) != 0 {
					ownCapsList = append(ownCapsList, c)
				}
			}
			return
		}
		ownCapsErr = errors.New("/proc/self/status has no CapPrm line")
	})
	return ownCapsList, ownCapsErr
}
