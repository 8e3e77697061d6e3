package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"

	"golang.org/x/exp/trace"
)

func ms(ns int64) float64 { return float64(ns) / 1e6 }

// slowest is the slowest frac of calls (at least one), slowest first.
func slowest[T any](calls []T, frac float64, dur func(T) int64) []T {
	s := slices.Clone(calls)
	slices.SortFunc(s, func(a, b T) int { return int(dur(b) - dur(a)) })
	return s[:max(1, int(frac*float64(len(s))))]
}

// splitDaemon splits the daemon's side of the slowest calls, and of all,
// by the connection goroutine's state.
func (m *model) splitDaemon(g *gor, calls []call, frac float64) {
	d := func(c call) int64 { return c.len() }
	all := slices.Clone(calls)
	slices.SortFunc(all, func(a, b call) int { return int(a.len() - b.len()) })
	fmt.Printf("  daemon side, woken to reply written: p50 %.3f, p99 %.3f, max %.3f ms\n",
		ms(all[len(all)/2].len()), ms(all[min(len(all)-1, len(all)*99/100)].len()), ms(all[len(all)-1].len()))
	for _, set := range []struct {
		name string
		c    []call
	}{{"slowest", slowest(calls, frac, d)}, {"all", calls}} {
		by, ran := map[string]int64{}, map[string]int64{}
		var sum, stw, mark int64
		for _, c := range set.c {
			sum += c.len()
			for _, s := range m.stw {
				stw += overlap(s, c.span)
			}
			for _, s := range m.mark {
				mark += overlap(s, c.span)
			}
			for _, s := range g.states {
				o := overlap(s.span, c.span)
				if o == 0 {
					continue
				}
				k := s.st.String()
				if s.st != trace.GoRunning {
					k += " " + s.why
				}
				by[k] += o
				if s.st == trace.GoRunnable {
					m.ranDuring(span{max(s.start, c.start), min(s.end, c.end)}, ran)
				}
			}
		}
		n := float64(len(set.c))
		fmt.Printf("  %s %d: %.3f ms each; within a stop-the-world %.3f, a GC mark phase %.3f ms each\n", set.name, len(set.c), ms(sum)/n, ms(stw)/n, ms(mark)/n)
		top(by, sum, 6, "    ")
		if len(ran) > 1 {
			fmt.Println("    while it was runnable, the Ps ran:")
			top(ran, 0, 6, "      ")
		}
	}
}

// splitClient matches the client's calls (fairload victim -times) with
// the daemon's and splits the slowest: sent to woken, woken to written,
// written to done.
func (m *model) splitClient(g *gor, calls []call, file string, frac float64) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var ops []struct {
		Op    string     `json:"op"`
		Times [][2]int64 `json:"times"`
	}
	if err := json.Unmarshal(b, &ops); err != nil {
		return err
	}
	type both struct {
		client span
		daemon call
	}
	var matched []both
	for _, op := range ops {
		j := 0
		for _, t := range op.Times {
			c := span{t[0], t[1]}
			for j < len(calls) && calls[j].begun < c.start {
				j++
			}
			// The reply may reach the client before the daemon's write
			// returns and its region ends: match on the region's start.
			if j < len(calls) && calls[j].begun <= c.end {
				matched = append(matched, both{c, calls[j]})
			}
		}
	}
	if len(matched) == 0 {
		return fmt.Errorf("%s: no call matched", file)
	}
	d := func(x both) int64 { return x.client.len() }
	fmt.Printf("  client side: %d calls matched\n", len(matched))
	for _, set := range []struct {
		name string
		c    []both
	}{{"slowest", slowest(matched, frac, d)}, {"all", matched}} {
		var sum, sent, daemon, done int64
		var fromIdle, fromRunning int
		var idleWait, runningWait int64
		ran := map[string]int64{}
		for _, x := range set.c {
			wake, written := max(x.daemon.start, x.client.start), min(x.daemon.end, x.client.end)
			if w, ok := m.wokenAt(g.id, x.daemon.start); ok && w.fromIdle {
				fromIdle++
				idleWait += wake - x.client.start
			} else if ok {
				fromRunning++
				runningWait += wake - x.client.start
			}
			sum += x.client.len()
			sent += wake - x.client.start
			daemon += written - wake
			done += x.client.end - written
			m.ranDuring(span{x.client.start, wake}, ran)
		}
		n := float64(len(set.c))
		fmt.Printf("  %s %d, ms each: %.3f = sent to woken %.3f + woken to written %.3f + written to client done %.3f\n",
			set.name, len(set.c), ms(sum)/n, ms(sent)/n, ms(daemon)/n, ms(done)/n)
		fmt.Printf("    woken by a thread that had been waiting (for the network or for work): %d, sent to woken %.3f ms each\n", fromIdle, ms(idleWait)/float64(max(fromIdle, 1)))
		fmt.Printf("    by one already running, none having waited on the network: %d, %.3f ms each\n", fromRunning, ms(runningWait)/float64(max(fromRunning, 1)))
		fmt.Println("    between sent and woken, the Ps ran:")
		top(ran, 0, 4, "      ")
	}
	return nil
}

// cpuOf prints what the daemon's Ps ran over w, and its CPU samples there
// by our innermost frame.
func (m *model) cpuOf(g *gor, start, end int64) {
	w := span{start, end}
	ran := map[string]int64{}
	m.ranDuring(w, ran)
	fmt.Printf("  the daemon's Ps over these calls (%.2f s):\n", float64(w.len())/1e9)
	top(ran, 0, 8, "    ")
	all, own := map[string]int64{}, map[string]int64{}
	for _, s := range m.samples {
		if s.at >= start && s.at <= end {
			all[s.ours] += 10e6 // 100 Hz
			if s.g == g.id {
				own[s.ours] += 10e6
			}
		}
	}
	if len(all) > 0 {
		fmt.Println("  CPU samples (10 ms each), the whole daemon, by its innermost frame of ours:")
		top(all, 0, 10, "    ")
		fmt.Println("  of which on this connection's goroutine:")
		top(own, 0, 5, "    ")
	}
}

// top prints m's largest entries, as ms and a share of sum (of m's when
// 0).
func top(m map[string]int64, sum int64, n int, prefix string) {
	type kv struct {
		k string
		v int64
	}
	var kvs []kv
	var all int64
	for k, v := range m {
		kvs = append(kvs, kv{k, v})
		all += v
	}
	if sum == 0 {
		sum = all
	}
	sort.Slice(kvs, func(i, j int) bool { return kvs[i].v > kvs[j].v })
	for i, x := range kvs {
		if i == n {
			break
		}
		if x.k == "" {
			x.k = "(runtime, no frame of ours)"
		}
		fmt.Printf("%s%8.2f ms %5.1f%%  %s\n", prefix, ms(x.v), 100*float64(x.v)/float64(max(sum, 1)), x.k)
	}
}
