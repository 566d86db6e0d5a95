package probebpf

// Regenerate with `make generate` (needs clang); the outputs are committed so
// that go build needs no clang. pyobs.h and pywalk.h (internal/bpf/include):
// the kernel types and the in-kernel CPython stack walk the programs share.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target amd64 -type live -type pend -type natrec alloc alloc.bpf.c -- -I../../bpf/include -O2 -g -Wall -Werror
