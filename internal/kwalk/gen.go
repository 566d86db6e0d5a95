package kwalk

// Regenerate with `make generate` (needs clang); the outputs are committed so
// that go build needs no clang. pyobs.h (internal/bpf/include) holds the
// kernel types and helpers the programs share.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target amd64 -type sample_hdr -type frame -type count_key kwalk kwalk.bpf.c -- -I../bpf/include -O2 -g -Wall -Werror
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target amd64 kwalkheld kwalk.bpf.c -- -I../bpf/include -O2 -g -Wall -Werror -DPYWALK_CFG_MUTABLE
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target amd64 kwalklate kwalk.bpf.c -- -I../bpf/include -O2 -g -Wall -Werror -DPYWALK_ADDRS_LATE
