package export

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// QueueOptions bound a Queue.
type QueueOptions struct {
	Len        int           // windows held while the sink is down (default 4)
	Timeout    time.Duration // one export attempt (default 10 s)
	MinBackoff time.Duration // first retry delay (default 250 ms), doubled up to MaxBackoff
	MaxBackoff time.Duration // default 8 s
	// MaxAge: a window not delivered this long after it ended is dropped
	// (default Len windows' worth, at least 1 min). Zero: the default.
	MaxAge time.Duration
	// OnError receives each failed attempt (rate-limited by the backoff).
	OnError func(sink string, err error)
}

// QueueStats is a Queue's account, read at any time.
type QueueStats struct {
	Sent, Failed, Dropped uint64
	Queued                int
}

// Queue hands windows to one Sink from its own goroutine: Put never
// blocks; when the queue is full the oldest window is dropped and counted.
type Queue struct {
	sink Sink
	opt  QueueOptions

	mu     sync.Mutex
	buf    []*Window
	closed bool
	wake   chan struct{}
	done   chan struct{}

	sent, failed, dropped atomic.Uint64
	stop                  context.CancelFunc
	ctx                   context.Context
}

// NewQueue starts a queue for sink.
func NewQueue(sink Sink, opt QueueOptions) *Queue {
	if opt.Len <= 0 {
		opt.Len = 4
	}
	if opt.Timeout <= 0 {
		opt.Timeout = 10 * time.Second
	}
	if opt.MinBackoff <= 0 {
		opt.MinBackoff = 250 * time.Millisecond
	}
	if opt.MaxBackoff < opt.MinBackoff {
		opt.MaxBackoff = max(8*time.Second, opt.MinBackoff)
	}
	q := &Queue{sink: sink, opt: opt, wake: make(chan struct{}, 1), done: make(chan struct{})}
	q.ctx, q.stop = context.WithCancel(context.Background())
	go q.loop()
	return q
}

// Sink is the queue's sink.
func (q *Queue) Sink() Sink { return q.sink }

// Put queues w; it never blocks. A full queue drops its oldest window.
func (q *Queue) Put(w *Window) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		q.dropped.Add(1)
		return
	}
	if len(q.buf) >= q.opt.Len {
		q.buf[0] = nil
		q.buf = q.buf[1:]
		q.dropped.Add(1)
	}
	q.buf = append(q.buf, w)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Stats returns the queue's account so far.
func (q *Queue) Stats() QueueStats {
	q.mu.Lock()
	n := len(q.buf)
	q.mu.Unlock()
	return QueueStats{Sent: q.sent.Load(), Failed: q.failed.Load(), Dropped: q.dropped.Load(), Queued: n}
}

// Close stops taking windows and tries to deliver what is queued until
// ctx ends (the last window's flush); what is left is dropped and counted.
func (q *Queue) Close(ctx context.Context) QueueStats {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	select {
	case <-q.done:
	case <-ctx.Done():
		q.stop()
		<-q.done
	}
	if c, ok := q.sink.(io.Closer); ok {
		_ = c.Close() // a connection (gRPC) the sink holds
	}
	return q.Stats()
}

func (q *Queue) next() (w *Window, closed bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.buf) > 0 {
		w = q.buf[0]
		q.buf[0] = nil
		q.buf = q.buf[1:]
	}
	return w, q.closed
}

func (q *Queue) maxAge() time.Duration {
	if q.opt.MaxAge > 0 {
		return q.opt.MaxAge
	}
	return time.Minute
}

func (q *Queue) loop() {
	defer close(q.done)
	defer func() {
		// Stopped: whatever is still queued is dropped.
		q.mu.Lock()
		q.dropped.Add(uint64(len(q.buf)))
		q.buf = nil
		q.mu.Unlock()
	}()
	for {
		w, closed := q.next()
		if w == nil {
			if closed {
				return
			}
			select {
			case <-q.wake:
			case <-q.ctx.Done():
				return
			}
			continue
		}
		if !q.deliver(w) {
			if q.ctx.Err() != nil {
				return
			}
		}
	}
}

// deliver tries w until it is sent, too old, or the queue is stopped.
func (q *Queue) deliver(w *Window) bool {
	backoff := q.opt.MinBackoff
	for {
		ctx, cancel := context.WithTimeout(q.ctx, q.opt.Timeout)
		err := q.sink.Export(ctx, w)
		cancel()
		if err == nil {
			q.sent.Add(1)
			return true
		}
		q.failed.Add(1)
		if q.opt.OnError != nil && !errors.Is(err, context.Canceled) {
			q.opt.OnError(q.sink.Name(), err)
		}
		if q.ctx.Err() != nil || time.Since(w.End)+backoff > q.maxAge() {
			q.dropped.Add(1)
			return false
		}
		// While this window waits, newer ones may push the oldest queued
		// ones out (Put): the queue stays bounded whatever the outage.
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-q.ctx.Done():
			t.Stop()
			q.dropped.Add(1)
			return false
		}
		backoff = min(2*backoff, q.opt.MaxBackoff)
		if q.isNewerQueued(w) && q.full() {
			// The queue filled behind this window: give up on it so the
			// newest ones get their turn (it counts as dropped).
			q.dropped.Add(1)
			return false
		}
	}
}

func (q *Queue) isNewerQueued(w *Window) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.buf) > 0 && q.buf[len(q.buf)-1].Seq > w.Seq
}

func (q *Queue) full() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.buf) >= q.opt.Len
}
