package record

// Options.Stream, when set, is called with the recording's profile as it
// grows, every Options.Look (200 ms by default, up to 1 s above 4 kHz; with the Progress line's numbers), on the
// recording's own goroutine: the callee may read the profile (weights only
// grow; no stack is removed while recording) but must not keep it past the
// call or modify it, and should return quickly (samples wait meanwhile).
// Live views (internal/top) take per-interval differences from it.
func (r *Recorder) stream(p Progress) {
	if r.opt.Stream != nil {
		r.opt.Stream(r.prof, p)
	}
}
