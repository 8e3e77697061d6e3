package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/pkg/api"
)

// cudaDriver checkpoints the CUDA state of one process at a time: the
// cuda-checkpoint tool, the libcuda helper or the simulated driver.
type cudaDriver interface {
	Caps() checkpoint.Caps
	State(ctx context.Context, pid int) (checkpoint.State, error)
	Lock(ctx context.Context, pid int, timeout time.Duration) error
	Checkpoint(ctx context.Context, pid int) error
	Restore(ctx context.Context, pid int, pairs []checkpoint.GPUPair) error
	Unlock(ctx context.Context, pid int) error
	Close() error
}

// errNoDriver is why freeze and thaw are unavailable.
var errNoDriver = errors.New("no checkpoint driver")

// openDriver picks the checkpoint driver --checkpoint-driver asks for. In
// auto mode a missing driver is not fatal: freeze and thaw then answer
// unavailable with the reason.
func (d *Daemon) openDriver(ctx context.Context) error {
	mode := d.cfg.CheckpointDriver
	if mode == config.DriverAuto && d.simDir != "" {
		mode = config.DriverSim
	}
	var err error
	switch mode {
	case config.DriverSim:
		d.driver, err = checkpoint.NewSim(d.simDir, checkpoint.SimOptions{
			CheckpointPerGiB: d.cfg.SimCheckpointGiB, RestorePerGiB: d.cfg.SimRestoreGiB, LockWait: d.cfg.LockTimeout})
	case config.DriverAPI:
		d.driver, err = d.openAPIDriver(ctx)
	case config.DriverCLI:
		d.driver, err = checkpoint.NewCLI(ctx, checkpoint.CLIOptions{Path: d.cfg.CudaCheckpoint})
	case config.DriverNone:
		d.driverErr = fmt.Errorf("%w: --checkpoint-driver none", errNoDriver)
		return nil
	case config.DriverAuto:
		var apiErr, cliErr error
		if d.driver, apiErr = d.openAPIDriver(ctx); apiErr == nil {
			break
		}
		if d.driver, cliErr = checkpoint.NewCLI(ctx, checkpoint.CLIOptions{Path: d.cfg.CudaCheckpoint}); cliErr == nil {
			break
		}
		d.driver = nil
		d.driverErr = fmt.Errorf("%w: driver API: %v; cuda-checkpoint: %v", errNoDriver, apiErr, cliErr)
		d.log.Warn("freeze and thaw are unavailable", zap.Error(d.driverErr))
		return nil
	}
	if err != nil {
		d.driver = nil
		return fmt.Errorf("--checkpoint-driver %s: %w", mode, err)
	}
	d.log.Info("checkpoint driver", zap.Any("caps", d.driver.Caps()))
	return nil
}

func (d *Daemon) openAPIDriver(ctx context.Context) (cudaDriver, error) {
	a, err := checkpoint.NewAPI(ctx, checkpoint.APIOptions{HelperPath: d.helperPath, Library: d.cfg.Libcuda})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// driverName is the checkpoint driver's kind, or "none".
func (d *Daemon) driverName() string {
	if d.driver == nil {
		return config.DriverNone
	}
	return d.driver.Caps().Kind
}

// driverWarning is the known problem of the checkpoint driver's NVIDIA
// driver, or "".
func (d *Daemon) driverWarning() string {
	if d.driver == nil {
		return ""
	}
	return d.driver.Caps().Warning
}

// needDriver fails with the reason freeze and thaw are unavailable.
func (d *Daemon) needDriver() error {
	if d.driver == nil {
		return fmt.Errorf("freeze and thaw are unavailable: %w", d.driverErr)
	}
	return nil
}

// driverCaps are the capabilities hello reports for the checkpoint driver.
func (d *Daemon) driverCaps() []string {
	if d.driver == nil {
		return nil
	}
	caps := []string{api.CapFreeze, api.CapActivate}
	switch d.driver.Caps().Kind {
	case config.DriverAPI:
		caps = append(caps, api.CapDriverAPI)
	case config.DriverCLI:
		caps = append(caps, api.CapDriverCLI)
	case config.DriverSim:
		caps = append(caps, api.CapDriverSim)
	}
	if d.driver.Caps().DeviceMap {
		caps = append(caps, api.CapMigrate)
	}
	return caps
}
