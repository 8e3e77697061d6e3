package main

import (
	"strings"
	"testing"
)

func TestHostMemDetectsCorruption(t *testing.T) {
	m := newHostMem(1, 42)
	if err := m.verify(); err != nil {
		t.Fatal(err)
	}
	m.words[1000] ^= 1
	err := m.verify()
	if err == nil || !strings.Contains(err.Error(), "offset 8000 ") {
		t.Errorf("verify after corrupting word 1000: %v", err)
	}
}
