# gpusched: see README.md. Targets that start the daemon or run the tests need root.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/gpusched/gpusched/internal/daemon.Version=$(VERSION) \
           -X github.com/gpusched/gpusched/internal/cli.Version=$(VERSION)
PY      := /usr/bin/python3

.PHONY: all build install uninstall test test-deps test-go test-python test-fuzz test-gpu-check lint bench bench-sdk demo fuzz crash load reliability gpu-check-bundle fairness-bundle clean

all: build

build:
	go build -ldflags '$(LDFLAGS)' -o bin/ ./cmd/gpuschedd ./cmd/gpusched-init ./cmd/gpuschedctl ./cmd/gpusched-simjob ./cmd/gpusched-router

# Binaries, systemd units and snippets, completions and docs under PREFIX
# (default /usr/local; DESTDIR stages them elsewhere); reloads systemd when it runs.
install: build
	scripts/install.sh install

uninstall:
	scripts/install.sh uninstall

# The README's test command: installs what the tests need, then runs every test.
test: test-deps lint test-go test-fuzz test-python test-gpu-check
	bash scripts/install-criu_test.sh --reuse >/dev/null
	@echo "all tests passed"

test-deps:
	scripts/test-deps.sh

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	cd deploy/k8s && go vet ./...
	shellcheck scripts/install.sh deploy/slurm/*.sh deploy/slurm/gpusched-slurm \
		scripts/gpu-check.sh scripts/gpu-check/bundle.sh scripts/gpu-check_test.sh scripts/schedtrace/record.sh

test-go:
	go test -race -count=1 ./...
	cd deploy/k8s && go test -count=1 ./...

# The hardware check's dry run on simulated GPUs: the script cannot rot unnoticed.
test-gpu-check:
	scripts/gpu-check_test.sh

# What the hardware check needs on a GPU machine without Go or network, in one
# ignored directory that a device call carries (docs/hardware.md): binaries
# (cgo, for go-nvml), the fakes for --dry-run, the private CRIU copy.
# CUDA_CHECKPOINT=PATH adds NVIDIA's cuda-checkpoint; GPU_CHECK_BUNDLE=DIR builds elsewhere.
GPU_CHECK_BUNDLE ?= .gpu-check
gpu-check-bundle:
	LDFLAGS='$(LDFLAGS)' CUDA_CHECKPOINT='$(CUDA_CHECKPOINT)' scripts/gpu-check/bundle.sh $(GPU_CHECK_BUNDLE)

# The fairness benchmarks (BenchmarkFairness, BenchmarkRefusedConnection), built to run as
# root on a machine without Go, such as a lent GPU host, in one ignored directory a device
# call carries: $(FAIRNESS_BUNDLE)/run.sh there (docs/guarantees.md, "Measured").
FAIRNESS_BUNDLE ?= .fairness
fairness-bundle:
	scripts/fairness-bundle.sh $(FAIRNESS_BUNDLE)

test-python: build
	GPUSCHED_BIN_DIR=$(CURDIR)/bin $(PY) -m pytest -q sdk/python/tests

bench: bench-sdk
	go test -p 1 -run '^$$' -bench . -benchtime 3s ./internal/daemon/ ./internal/checkpoint/ ./internal/placement/ ./internal/memfill/ ./internal/routerbench/

# The Python SDK's per-swap overhead over a raw socket client (200-step swap loop, simulated driver).
bench-sdk: build
	GPUSCHED_BIN_DIR=$(CURDIR)/bin $(PY) sdk/python/bench/swap_overhead.py --steps 200

demo:
	scripts/demo.sh

# The fuzz targets: the protocol decoder, every method's params, the escaping
# of a log's bytes in a logs reply, the jobs-file parsers, the config file and
# the router's scan for a body's model. `make
# test` runs each for FUZZTIME=20000x (a count: a duration races the fuzzing
# coordinator's own deadline and fails with "context deadline exceeded" on a
# loaded machine, golang/go#75804, fixed in Go 1.27); `make fuzz` runs them
# for FUZZTIME=2m each (any FUZZTIME works: make fuzz FUZZTIME=10m).
FUZZTIME ?= 2m
FUZZ_TARGETS := internal/daemon:FuzzReadRequest internal/daemon:FuzzParams internal/logreply:FuzzAppendString \
	internal/cli:FuzzParseJobsFile internal/cli:FuzzParseJobsCSV internal/config:FuzzFile \
	internal/jobqueue:FuzzIsOOM internal/router:FuzzModelOf
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} for $(FUZZTIME)"; \
		go test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ./$${t%%:*}/ || exit 1; \
	done

test-fuzz:
	$(MAKE) --no-print-directory fuzz FUZZTIME=20000x

# The long crash test: CRASH_OPS operations of a randomized workload with kill -9
# of the daemon at random points, a fresh seed (CRASH_SEED=N replays one).
CRASH_OPS  ?= 2000
CRASH_SEED ?= 0
crash:
	go test -count=1 -timeout 90m -run '^TestCrashRandomWorkload$$' -v ./internal/daemon/ \
		-crash.ops $(CRASH_OPS) -crash.seed $(CRASH_SEED)

# The long load test: 64 clients, LOAD_OPS operations each, under the race detector.
LOAD_OPS ?= 500
load:
	go test -race -count=1 -timeout 60m -run '^TestLoad64Clients$$' -v ./internal/daemon/ \
		-load.ops $(LOAD_OPS) -load.seed 0

# Every long form: crash, load and fuzz.
reliability: crash load fuzz

clean:
	rm -rf bin
