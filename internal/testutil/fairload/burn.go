package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
)

// burn keeps every CPU it may use busy without calling the daemon, until
// SIGTERM: the machine's contention without the hostile user's requests,
// the control that tells the daemon's share of a victim's latency from the
// CPU scheduler's.
func burn() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	for range runtime.GOMAXPROCS(0) {
		go func() {
			for n := uint64(0); ctx.Err() == nil; n++ {
				for range 1 << 16 {
					n = n*6364136223846793005 + 1
				}
			}
		}()
	}
	fmt.Println("burning")
	<-ctx.Done()
}
