package main

import (
	"context"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/session"
)

// targetAny: -p PID attaches without requiring Python (stat; red needs it
// only for --slowest stacks); -- CMD spawns.
func targetAny(cmd *cobra.Command, g *globals, args []string) (*session.Session, error) {
	if g.pid > 0 {
		if len(args) > 0 {
			if cmd.ArgsLenAtDash() >= 0 {
				return nil, usagef("give either -p PID or -- CMD ARGS, not both")
			}
			return nil, usagef("unexpected arguments %q (to spawn a command, put it after --)", args)
		}
		s, _, err := session.AttachAny(g.pid)
		return s, err
	}
	return target(cmd, g, args)
}

// graceOnInterrupt is a spawned target's end of life when ctx ends first
// (session.Finish takes it over at merge): Ctrl-C reached the whole group,
// so the command gets 5 s to finish, then is killed.
func graceOnInterrupt(ctx context.Context, s *session.Session) {
	go func() {
		select {
		case <-s.Exited():
			return
		case <-ctx.Done():
		}
		select {
		case <-s.Exited():
		case <-time.After(5 * time.Second):
			s.Kill(2 * time.Second)
		}
	}()
}

func isTTY(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
