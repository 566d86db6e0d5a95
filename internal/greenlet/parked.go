package greenlet

import "strings"

// ShortType is a type's name without its module: greenlet, Greenlet, Hub.
func ShortType(tpName string) string {
	if i := strings.LastIndexByte(tpName, '.'); i >= 0 {
		return tpName[i+1:]
	}
	return tpName
}

// IsHub reports whether a greenlet type is a gevent hub: gevent.hub.Hub
// (tp_name "Hub"), or a subclass named ...Hub (gevent's GEVENT_HUB setting
// names the class: keep "Hub" at the end of its name to be told).
func IsHub(tpName string) bool { return strings.HasSuffix(ShortType(tpName), "Hub") }

// Parked lists, per main greenlet (one per thread), the greenlets of a
// snapshot that are parked in a gevent wait: suspended with saved Python
// frames, not a hub, and either switched away to a hub (their parent is a
// hub: gevent spawns every Greenlet with the hub as parent, and each of its
// blocking calls — sleep, Event/AsyncResult.wait, Semaphore.acquire,
// socket I/O, join — ends in hub.switch(), gevent's one way for a greenlet
// to give up its thread) or the thread's main greenlet (the hub's parent:
// it is suspended only while the hub or a greenlet runs, i.e. in a gevent
// wait of its own).
//
// The rule reads the parent, not the innermost frame: gevent's wheels
// compile the wait machinery (_gevent_c_waiter, _gevent_cevent,
// _gevent_c_hub_primitives, …) with Cython, which leaves no Python frame,
// so a greenlet parked in Event.wait shows its caller as innermost frame
// and one in gevent.sleep shows hub.py's sleep. While a hub is blocked in
// its event loop no greenlet is runnable (the loop only blocks with no
// callback pending: a greenlet made ready by a switch or spawn is a
// callback), so every greenlet this rule keeps is waiting for a watcher or
// a notification at that moment.
func (s *Snapshot) Parked() map[uint64][]*Greenlet {
	byAddr := s.ByAddr()
	out := map[uint64][]*Greenlet{}
	for i := range s.Greenlets {
		g := &s.Greenlets[i]
		if g.State != StateSuspended || g.Err != "" || len(g.Frames) == 0 || IsHub(g.Type) {
			continue
		}
		if !g.Main {
			p, ok := byAddr[g.Parent]
			if !ok || !IsHub(p.Type) {
				continue
			}
		}
		out[g.MainGreenlet] = append(out[g.MainGreenlet], g)
	}
	return out
}

// ByAddr indexes the snapshot's greenlets by address.
func (s *Snapshot) ByAddr() map[uint64]*Greenlet {
	m := make(map[uint64]*Greenlet, len(s.Greenlets))
	for i := range s.Greenlets {
		m[s.Greenlets[i].Addr] = &s.Greenlets[i]
	}
	return m
}

// ChainOf is g and its parents as a snapshot's ByAddr has them, g first (at most
// 64; a cycle or a parent not in the snapshot ends it).
func ChainOf(g *Greenlet, byAddr map[uint64]*Greenlet) []*Greenlet {
	out := []*Greenlet{g}
	seen := map[uint64]bool{g.Addr: true}
	for p := g.Parent; p != 0 && !seen[p] && len(out) < 64; {
		pg, ok := byAddr[p]
		if !ok {
			break
		}
		seen[p] = true
		out = append(out, pg)
		p = pg.Parent
	}
	return out
}
