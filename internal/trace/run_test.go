package trace

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestRunRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	if _, err := Run(ctx, nil, Options{Engine: "auto"}); err == nil || !strings.Contains(err.Error(), "no target") {
		t.Errorf("no target: %v", err)
	}
	if _, err := Run(ctx, nil, Options{Engine: "tracepoint", Argv: []string{"true"}}); !errors.Is(err, ErrSpawnTracepoint) {
		t.Errorf("tracepoint spawn: %v", err)
	}
	if _, err := Run(ctx, nil, Options{Engine: "bogus", Argv: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "unknown --engine") {
		t.Errorf("bad engine: %v", err)
	}
}
