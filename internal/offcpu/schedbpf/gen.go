package schedbpf

// Regenerate with `make generate` (needs clang); the outputs are committed so
// that go build needs no clang. pyobs.h: the kernel types the three
// programs share (internal/bpf/include).
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target amd64 -type start -type wkey -type wval -type thr -type pkey -type wake -type okey offcpu offcpu.bpf.c -- -I../../bpf/include -O2 -g -Wall -Werror
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target amd64 offcpuheld offcpu.bpf.c -- -I../../bpf/include -O2 -g -Wall -Werror -DOFFCPU_HELD
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target amd64 offcpulate offcpu.bpf.c -- -I../../bpf/include -O2 -g -Wall -Werror -DOFFCPU_LATE
