# gpusched: see README.md. Targets that start the daemon or run the tests need root.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/gpusched/gpusched/internal/daemon.Version=$(VERSION) \
           -X github.com/gpusched/gpusched/internal/cli.Version=$(VERSION)
PY      := /usr/bin/python3

.PHONY: all build install uninstall test test-deps test-go test-python lint bench bench-sdk demo fuzz clean

all: build

build:
	go build -ldflags '$(LDFLAGS)' -o bin/ ./cmd/gpuschedd ./cmd/gpuschedctl ./cmd/gpusched-simjob

# Binaries, systemd units and snippets, completions and docs under PREFIX
# (default /usr/local; DESTDIR stages them elsewhere); reloads systemd when it runs.
install: build
	scripts/install.sh install

uninstall:
	scripts/install.sh uninstall

# The README's test command: installs what the tests need, then runs every test.
test: test-deps lint test-go test-python
	bash scripts/install-criu_test.sh --reuse >/dev/null
	@echo "all tests passed"

test-deps:
	scripts/test-deps.sh

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	cd deploy/k8s && go vet ./...
	shellcheck scripts/install.sh deploy/slurm/*.sh deploy/slurm/gpusched-slurm

test-go:
	go test -race -count=1 ./...
	cd deploy/k8s && go test -count=1 ./...

test-python: build
	GPUSCHED_BIN_DIR=$(CURDIR)/bin $(PY) -m pytest -q sdk/python/tests

bench: bench-sdk
	go test -p 1 -run '^$$' -bench . -benchtime 3s ./internal/daemon/ ./internal/checkpoint/ ./internal/placement/ ./internal/memfill/

# The Python SDK's per-swap overhead over a raw socket client (200-step swap loop, simulated driver).
bench-sdk: build
	GPUSCHED_BIN_DIR=$(CURDIR)/bin $(PY) sdk/python/bench/swap_overhead.py --steps 200

demo:
	scripts/demo.sh

fuzz:
	go test -run '^$$' -fuzz FuzzReadRequest -fuzztime 20s ./internal/daemon/
	go test -run '^$$' -fuzz FuzzParseJobsFile -fuzztime 20s -fuzzminimizetime 1s ./internal/cli/
	go test -run '^$$' -fuzz FuzzParseJobsCSV -fuzztime 20s -fuzzminimizetime 1s ./internal/cli/
	go test -run '^$$' -fuzz FuzzIsOOM -fuzztime 10s ./internal/jobqueue/

clean:
	rm -rf bin
