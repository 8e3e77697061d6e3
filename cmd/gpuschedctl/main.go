// Command gpuschedctl is the command-line client of the gpusched daemon;
// everything it does lives in internal/cli.
package main

import (
	"os"

	"github.com/gpusched/gpusched/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
