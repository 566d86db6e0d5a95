//go:build !amd64

package red

import (
	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/procset"
	"github.com/pyobs/pyobs/internal/session"
)

// ksampler: the kernel sampler is x86_64 only; red reads stacks from user
// space instead.
type ksampler struct {
	drainedAt uint64
	prof      *flame.Profile
	proc      func(pid int) string
}

func openSampler(s *session.Session, tids *session.TidMap, opt Options, pr *probe, set procset.Options) (*ksampler, string) {
	return nil, "the in-kernel walk is x86_64 only"
}

func (k *ksampler) drain()                                                             {}
func (k *ksampler) stop()                                                              {}
func (k *ksampler) close()                                                             {}
func (k *ksampler) report(bool, float64) *SamplingReport                               { return &SamplingReport{} }
func (k *ksampler) join(int, string, bool, int, uint32, uint64, uint64) []SampledStack { return nil }
