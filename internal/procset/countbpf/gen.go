// Package countbpf counts the syscalls of each member of a process set
// (internal/bpf/include/procset.h): the smallest program that uses the set,
// for internal/procset's tests.
//
// Price: one hash lookup per syscall of the machine, two for a member's.
package countbpf

// Regenerate with `make generate` (needs clang); the outputs are committed.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target amd64 Count count.bpf.c -- -I../../bpf/include -O2 -g -Wall -Werror
