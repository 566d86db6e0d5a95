//go:build !amd64 && !arm64

package procfs

// syscallNames is empty where pyobs has no table: numbers are shown as
// syscall_N.
var syscallNames = map[int]string{}
