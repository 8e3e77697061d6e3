package main

import "fmt"

// hostMem is real host memory filled with a pattern that a restore from a
// checkpoint must preserve: word i holds mix(seed + i).
type hostMem struct {
	seed  uint64
	words []uint64
}

func newHostMem(mib, seed uint64) *hostMem {
	m := &hostMem{seed: seed, words: make([]uint64, mib<<20/8)}
	for i := range m.words {
		m.words[i] = mix(seed + uint64(i))
	}
	return m
}

// verify checks every word and describes the first corrupt one.
func (m *hostMem) verify() error {
	for i, got := range m.words {
		if want := mix(m.seed + uint64(i)); got != want {
			return fmt.Errorf("host memory corrupt at offset %d (word %d of %d): got %#016x, want %#016x",
				i*8, i, len(m.words), got, want)
		}
	}
	return nil
}

// mix is the SplitMix64 finaliser: a cheap hash of a word.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
