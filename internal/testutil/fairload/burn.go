package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"
)

// burn keeps every CPU it may use busy without calling the daemon, until
// SIGTERM: the machine's contention without the hostile user's requests,
// the control that tells the daemon's share of a victim's latency from the
// CPU scheduler's. By default it spins in registers; with -decode it does
// what the hostile's log readers spend their CPU on (perf record of
// fairload hostile: two thirds of it), decoding a reply of every line of a
// log of newlines, over and over, with no daemon in the loop.
func burn(args []string) {
	fs := flag.NewFlagSet("burn", flag.ExitOnError)
	decode := fs.Bool("decode", false, "decode 65,536-line log replies instead of spinning in registers")
	workers := fs.Int("workers", runtime.GOMAXPROCS(0), "goroutines burning")
	pause := fs.Duration("pause", 0, "sleep after each decode or round of spinning, as a caller waiting on replies does")
	fs.Parse(args)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	reply, err := json.Marshal(map[string]any{"name": "talker", "lines": make([]string, 1<<16)})
	if err != nil {
		panic(err)
	}
	for range *workers {
		go func() {
			for n := uint64(0); ctx.Err() == nil; n++ {
				if *decode {
					var r struct{ Lines []string }
					_ = json.Unmarshal(reply, &r)
				} else {
					for range 1 << 16 {
						n = n*6364136223846793005 + 1
					}
				}
				if *pause > 0 {
					time.Sleep(*pause)
				}
			}
		}()
	}
	fmt.Println("burning")
	<-ctx.Done()
}
