package checkpoint

import (
	"os"
	"testing"

	"github.com/gpusched/gpusched/internal/testutil"
)

func TestMain(m *testing.M) {
	testutil.TreeInit()
	code := m.Run()
	testutil.Cleanup()
	os.Exit(code)
}
