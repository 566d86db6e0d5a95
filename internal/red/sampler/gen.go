package sampler

// Regenerate with `make generate` (needs clang); the outputs are committed
// so that go build needs no clang. -target amd64: pywalk.h reads the
// thread's fsbase through CO-RE.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target amd64 -type hit redsample sample.bpf.c -- -I../../bpf/include -O2 -g -Wall -Werror
