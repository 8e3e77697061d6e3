package daemon

import (
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/gpusched/gpusched/internal/config"
)

// newLogger builds the daemon's logger: stderr, where journald picks it up.
func newLogger(cfg config.Config) (*zap.Logger, error) {
	zc := zap.NewProductionConfig()
	if cfg.LogFormat == "console" {
		zc = zap.NewDevelopmentConfig()
		zc.EncoderConfig.EncodeLevel = zapcore.CapitalLevelEncoder
	}
	lvl, err := zapcore.ParseLevel(cfg.LogLevel)
	if err != nil {
		return nil, err
	}
	zc.Level = zap.NewAtomicLevelAt(lvl)
	zc.OutputPaths = []string{"stderr"}
	zc.ErrorOutputPaths = []string{"stderr"}
	zc.DisableStacktrace = true
	zc.Sampling = nil
	return zc.Build()
}
