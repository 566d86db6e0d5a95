package main

import (
	"os"
	"testing"

	"github.com/pyobs/pyobs/internal/session"
)

// TestMain: a command held before its exec is /proc/self/exe started
// again — here the test binary, when a test runs pyobs in-process (run):
// it must act as pyobs's holder does.
func TestMain(m *testing.M) {
	session.HoldMain()
	os.Exit(m.Run())
}
