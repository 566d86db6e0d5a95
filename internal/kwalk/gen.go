package kwalk

// Regenerate with `make bpf` (needs clang); the outputs are committed so
// that go build needs no clang.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target amd64 -type sample_hdr -type frame kwalk kwalk.bpf.c -- -O2 -g -Wall -Werror
