package router

import "go.uber.org/zap"

func zapModel(m *model) zap.Field { return zap.String("model", m.cfg.Name) }
