package flame

// WithoutRoots is p with each stack's first frame (a process frame)
// dropped and the frame table rebuilt, in its order, without the frames
// no stack uses any more: a set that held one process gives the profile
// one process gives.
func WithoutRoots(p *Profile) *Profile {
	q := New(p.Meta)
	used := make([]bool, p.NumFrames())
	stacks := p.Stacks()
	for _, s := range stacks {
		for _, id := range s.Frames[min(1, len(s.Frames)):] {
			used[id] = true
		}
	}
	remap := make([]int, p.NumFrames())
	for i := range remap {
		if used[i] {
			remap[i] = q.Intern(p.Frame(i))
		}
	}
	var ids []int
	for _, s := range stacks {
		if len(s.Frames) <= 1 {
			continue
		}
		ids = ids[:0]
		for _, id := range s.Frames[1:] {
			ids = append(ids, remap[id])
		}
		q.AddIDsN(ids, s.Weight, s.Count)
	}
	return q
}
