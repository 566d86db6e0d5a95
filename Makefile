# pyobs — see README.md. Targets: build test bench fuzz soak lint demo pythons bpf clean
GO       ?= go
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
FUZZTIME ?= 30s
# Interpreters for tests and the demo: scripts/pythons.sh caches them and
# prints the manifest path last.
PYTHON   ?= $(shell command -v python3)

.PHONY: build test bench fuzz soak lint demo pythons clean bpf bpf-trace bpf-red

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/pyobs ./cmd/pyobs

pythons:
	scripts/pythons.sh >/dev/null

# Everything real: spawns CPython targets on every interpreter in the manifest.
test: build pythons
	$(GO) test -count=1 -timeout 20m ./...

bench: build pythons
	$(GO) test -run '^$$' -bench . -benchtime 2s ./...
	scripts/bench-dump.sh
	scripts/bench-record.sh
	scripts/bench-native.sh
	scripts/bench-dump-native.sh
	scripts/bench-red.sh
	scripts/bench-trace.sh
	scripts/bench-offcpu.sh

fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

# The long fault-injection run (1200 cases; PYOBS_CASES=N, PYOBS_SEED=N) and
# the 2-minute memory bound; each prints a line for BENCHMARKS.md.
soak: build pythons
	PYOBS_SOAK=1 $(GO) test -count=1 -timeout 90m -v -run Soak ./...

# staticcheck from the Go module proxy, pinned; the race detector (needs cgo
# and gcc) on the packages with goroutines, and on the CLI run in-process.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
RACE_PKGS   ?= ./internal/ptrace ./internal/session ./internal/record ./internal/offcpu ./internal/trace/... ./internal/red

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt: $$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 15m $(RACE_PKGS)
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 5m -run 'RaceInProcess' ./cmd/pyobs

# The main job on a real example: dump every thread of a running program.
demo: build
	bin/pyobs dump --after 1s --kill -- $(PYTHON) testdata/targets/demo.py

# The offcpu eBPF program and its Go bindings (bpf2go; needs clang). The
# outputs are committed so that build needs no clang.
bpf: bpf-trace bpf-red
	cd internal/offcpu/schedbpf && $(GO) generate ./
	cd internal/kwalk && $(GO) generate ./

# trace's eBPF object (clang -target bpf, the go:generate line); committed too.
bpf-trace:
	cd internal/trace/tracepoint && $(GO) generate ./

# red's eBPF object (clang -target bpf); committed so that build needs no clang.
bpf-red:
	clang -O2 -g -Wall -Werror -target bpf -c internal/red/red.bpf.c -o internal/red/red_bpfel.o
	llvm-strip -g internal/red/red_bpfel.o

clean:
	rm -rf bin
