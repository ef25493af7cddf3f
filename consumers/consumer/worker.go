package consumer

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// queued is a message in a worker's queue, with the time it was handed
// over: a message's duration (pin_consumer_message_duration_seconds)
// counts its wait in the queue.
type queued struct {
	m    *kafka.Message
	at   time.Time
	size int64 // messageBytes(m)
}

// messageBytes is what a message holds in memory for the byte budgets
// (CONSUMER_QUEUE_BYTES, CONSUMER_TRANSACTION_BYTES): its key, value and
// headers.
func messageBytes(m *kafka.Message) int64 {
	n := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}

// worker processes one assigned partition, in offset order, on its own
// goroutine. The poll goroutine feeds it through a bounded queue; when the
// queue is full (QueueSize messages, or QueueBytes of them, the batch in
// hand included) the partition is paused and re-sought from the first
// message it could not take, so a slow or backing-off partition holds no
// more than that and never blocks the others.
type worker struct {
	r    *Runtime
	tp   kafka.TopicPartition
	in   chan queued
	quit chan struct{} // soft stop: take no new message
	done chan struct{}

	// ctx is cancelled when the drain budget is spent: in-flight work is
	// abandoned (its transaction rolls back; the message is redelivered).
	ctx    context.Context
	cancel context.CancelFunc

	// Owned by the poll goroutine. refused is the size of the message a
	// pause on bytes refused (0: the pause was not on bytes): the
	// partition resumes only once it fits, or the partition holds nothing.
	resumeFrom     kafka.Offset
	lastDispatched kafka.Offset
	refused        int64

	// items is the batch being handled, and carry the messages taken out
	// of in to be probed (inPartition.probe), handled before the next ones of in.
	// Owned by the worker's goroutine.
	items []*item
	carry []queued

	// waiting is set while the worker waits on a failure that is not its
	// message's own (an outage, a missing grant, a systemic bug): the poll
	// goroutine pauses the partition and /readyz reports it.
	waiting atomic.Pointer[waitState]

	// bytes is what the partition's messages hold from their hand-over
	// until their batch is done (queued, carried, or in a batch), kept
	// under CONSUMER_QUEUE_BYTES as len(in) is under CONSUMER_QUEUE_SIZE.
	bytes atomic.Int64

	paused atomic.Bool // written by the poll goroutine
	busy   atomic.Bool
	// committed counts the partition's messages committed since its
	// assignment, or since a transaction of them met marks that exist
	// (mayMeetMarks).
	committed    atomic.Int64
	abandoned    atomic.Bool  // drain budget spent: its late acks are ignored
	lastProgress atomic.Int64 // unix nanos
	stopOnce     sync.Once

	// stored is the offset ack stored last (0: none yet), and commitLow
	// says an offset stored below an earlier one still has to be
	// committed explicitly (ack). Acks of a partition come one after
	// another, from its worker or the lane that runs its batch.
	stored    atomic.Int64
	commitLow atomic.Bool
}

// mayMeetMarks reports whether the partition's next transaction is
// likely to meet marks that exist, a guess that only decides the cost:
// what a partition gets again after a crash or a lost assignment is what
// its previous owner committed but had not yet committed the offsets of,
// mostly the runs of a committer's round (one commit in flight, the next
// stored meanwhile), and it comes first. A failed commit left to the
// auto-commit, a member that finished its queue after losing its
// assignment, or a replay from an earlier offset leave more. So the
// first 2 × CONSUMER_BATCH_SIZE messages committed since the assignment,
// or since a transaction of the partition met a mark, look for their
// marks (txMode.findMarks); the rest insert them plainly, and a plain
// insert that meets one runs again to find it (marks.go).
func (w *worker) mayMeetMarks() bool {
	return w.committed.Load() < 2*int64(w.r.cfg.BatchSize)
}

// waitState is what a held partition waits on.
type waitState struct {
	cause  string // one of InfrastructureCauses
	reason string // the failure, for /readyz
	since  time.Time
}

// hold marks the worker as waiting on a failure that is not its message's
// own; release clears it.
func (w *worker) hold(cause string, err error) {
	if ws := w.waiting.Load(); ws != nil && ws.cause == cause {
		return
	}
	w.waiting.Store(&waitState{cause: cause, reason: abbreviate(err.Error(), 300), since: time.Now()})
}

func (w *worker) release() {
	if w.waiting.Load() != nil {
		w.waiting.Store(nil)
	}
}

// upcoming returns up to n messages queued behind it on its partition, of
// its route and readable: the candidates for a probe. They come from the
// rest of the batch, then from the queue (kept in carry, so that they are
// still handled in order).
func (w *worker) upcoming(it *item, n int) []*item {
	var out []*item
	same := func(c *item) bool {
		return c.routed && c.msg.Problem() == nil && c.route.EventType == it.route.EventType && !c.marked
	}
	after := false
	for _, c := range w.items {
		if c == it {
			after = true
			continue
		}
		if after && same(c) {
			if out = append(out, c); len(out) == n {
				return out
			}
		}
	}
	for i := 0; len(out) < n; i++ {
		if i == len(w.carry) {
			select {
			case q := <-w.in:
				w.carry = append(w.carry, q)
			default:
				return out
			}
		}
		if c := w.r.probeItem(w.carry[i].m); same(c) {
			out = append(out, c)
		}
	}
	return out
}

// next takes the next message: a carried one, else one from in; block
// says whether to wait for one. ok is false when there is none (or the
// worker is stopping).
func (w *worker) next(block bool) (q queued, ok bool) {
	if len(w.carry) > 0 {
		q = w.carry[0]
		w.carry[0] = queued{}
		w.carry = w.carry[1:]
		return q, true
	}
	if !block {
		select {
		case q := <-w.in:
			return q, true
		default:
			return q, false
		}
	}
	select {
	case <-w.quit:
	case <-w.ctx.Done():
	case q := <-w.in:
		return q, true
	}
	return q, false
}

func (r *Runtime) startWorker(tp kafka.TopicPartition) {
	r.mu.Lock()
	old := r.workers[tp.Partition]
	r.mu.Unlock()
	if old != nil { // never left behind by a revoke, but never reused either
		r.stopWorkers([]int32{tp.Partition})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	w := &worker{
		r: r, tp: tp,
		in:             make(chan queued, r.cfg.QueueSize),
		quit:           make(chan struct{}),
		done:           make(chan struct{}),
		ctx:            ctx,
		cancel:         cancel,
		lastDispatched: -1,
	}
	w.lastProgress.Store(time.Now().UnixNano())
	r.workers[tp.Partition] = w
	go w.run()
}

// stopWorkers stops the workers of the given partitions: no new message is
// taken, in-flight work gets the drain budget, then it is abandoned.
func (r *Runtime) stopWorkers(ps []int32) {
	r.mu.Lock()
	var ws []*worker
	for _, p := range ps {
		if w, ok := r.workers[p]; ok {
			ws = append(ws, w)
			delete(r.workers, p)
		}
	}
	r.mu.Unlock()
	for _, w := range ws {
		w.stopOnce.Do(func() { close(w.quit) })
		if w.paused.Load() {
			r.m.paused.Dec()
		}
	}
	deadline := time.After(r.cfg.DrainTimeout)
	for _, w := range ws {
		select {
		case <-w.done:
			continue
		case <-deadline:
		}
		// The budget is spent: abandon what is left. Cancelling rolls the
		// transactions back; a worker stuck in a read of a vanished
		// database gets a short grace, then is left behind, unable to
		// store an offset.
		r.log.Warn().Int32("partition", w.tp.Partition).Msg("drain budget spent: abandoning in-flight work")
		for _, w := range ws {
			w.abandoned.Store(true)
			w.cancel()
		}
		grace := time.After(abandonGrace)
		for _, w := range ws {
			select {
			case <-w.done:
			case <-grace:
				r.log.Error().Int32("partition", w.tp.Partition).Msg("worker does not stop: left behind")
				return
			}
		}
		return
	}
	for _, w := range ws {
		w.cancel()
	}
	for _, w := range ws {
		r.m.lag.DeleteLabelValues(r.svc.Topic, fmt.Sprint(w.tp.Partition))
	}
}

// dispatch hands a fetched message to its partition's worker (poll
// goroutine).
func (r *Runtime) dispatch(m *kafka.Message) {
	r.mu.Lock()
	w := r.workers[m.TopicPartition.Partition]
	r.mu.Unlock()
	if w == nil {
		return // not ours any more
	}
	if w.paused.Load() {
		return // re-fetched after the seek on resume
	}
	if off := m.TopicPartition.Offset; off <= w.lastDispatched {
		// librdkafka discards what it fetched before a seek or a pause of
		// ours (the fetch version barrier), so this is the partition's
		// position moved back under the member: its log truncated (an
		// unclean leader election, KIP-320) or the topic recreated
		// (OFFSET_OUT_OF_RANGE, then auto.offset.reset). These offsets
		// hold other messages now: hand them over, in order after what is
		// queued (the marks skip any message already applied). Dropping
		// them until the offsets passed the old ones lost them.
		r.log.Warn().Int32("partition", m.TopicPartition.Partition).Int64("offset", int64(off)).
			Int64("last_handed_over", int64(w.lastDispatched)).
			Msg("the partition's position moved back (log truncated or topic recreated): consuming from there")
		w.lastDispatched = off - 1
	}
	size := messageBytes(m)
	// Within the byte budget, or alone: a message larger than the budget
	// still goes, once the partition holds nothing else.
	held := w.bytes.Load()
	if held == 0 {
		// The partition had nothing in hand: its time idle is not time
		// without progress (stuck).
		w.lastProgress.Store(time.Now().UnixNano())
	}
	fits := held == 0 || held+size <= r.cfg.QueueBytes
	sent := false
	w.refused = 0
	if !fits {
		w.refused = size
	}
	if fits {
		w.bytes.Add(size) // before the hand-over: the worker subtracts it once done
		select {
		case w.in <- queued{m, time.Now(), size}:
			sent = true
		default:
			w.bytes.Add(-size)
		}
	}
	switch {
	case sent:
		w.lastDispatched = m.TopicPartition.Offset
	default:
		tp := m.TopicPartition
		if err := r.consumer.Pause([]kafka.TopicPartition{tp}); err != nil {
			r.log.Warn().Err(err).Int32("partition", tp.Partition).Msg("pause failed")
		}
		w.paused.Store(true)
		w.resumeFrom = tp.Offset
		r.m.paused.Inc()
		r.log.Debug().Int32("partition", tp.Partition).Int64("offset", int64(tp.Offset)).Msg("partition paused")
	}
}

// adjustPauses pauses the partitions whose worker waits on a failure that
// is not its message's own (nothing more is fetched for them meanwhile),
// and resumes paused partitions whose worker waits on nothing and whose
// queue has room again, seeking back to the first message that was not
// taken (poll goroutine). full reports a partition still paused for a
// full queue: its worker will make room soon, and the poll loop must look
// again soon (backPressurePoll).
func (r *Runtime) adjustPauses() (full bool) {
	r.mu.Lock()
	var hold, resume []*worker
	for _, w := range r.workers {
		waiting := w.waiting.Load() != nil
		switch {
		case !w.paused.Load() && waiting:
			hold = append(hold, w)
		case w.paused.Load() && !waiting && len(w.in) <= cap(w.in)/2 && w.roomFor(r.cfg.QueueBytes):
			resume = append(resume, w)
		case w.paused.Load() && !waiting:
			full = true
		}
	}
	r.mu.Unlock()
	for _, w := range hold {
		tp := w.tp
		if err := r.consumer.Pause([]kafka.TopicPartition{tp}); err != nil {
			r.log.Warn().Err(err).Int32("partition", tp.Partition).Msg("pause failed")
			continue
		}
		w.paused.Store(true)
		w.resumeFrom = w.lastDispatched + 1
		r.m.paused.Inc()
		r.log.Debug().Int32("partition", tp.Partition).Int64("offset", int64(w.resumeFrom)).Msg("partition paused: waiting on a failure")
	}
	for _, w := range resume {
		tp := kafka.TopicPartition{Topic: w.tp.Topic, Partition: w.tp.Partition, Offset: w.resumeFrom}
		if err := r.consumer.Seek(tp, -1); err != nil {
			r.log.Warn().Err(err).Int32("partition", tp.Partition).Msg("seek on resume failed")
			continue
		}
		if err := r.consumer.Resume([]kafka.TopicPartition{tp}); err != nil {
			r.log.Warn().Err(err).Int32("partition", tp.Partition).Msg("resume failed")
			continue
		}
		w.paused.Store(false)
		w.lastDispatched = w.resumeFrom - 1
		r.m.paused.Dec()
		r.log.Debug().Int32("partition", tp.Partition).Int64("offset", int64(tp.Offset)).Msg("partition resumed")
	}
	return full
}

// roomFor reports whether a paused partition's byte budget has room
// again: at half, and for the message the pause refused (poll goroutine).
func (w *worker) roomFor(budget int64) bool {
	held := w.bytes.Load()
	return held == 0 || (held <= budget/2 && held+w.refused <= budget)
}

func (w *worker) run() {
	defer close(w.done)
	batch := make([]queued, 0, w.r.cfg.BatchSize)
	for {
		select { // a stop wins over queued messages
		case <-w.quit:
			return
		default:
		}
		q, ok := w.next(true)
		if !ok {
			return
		}
		w.busy.Store(true) // from here: a worker waiting for a lane has work, and /readyz should say so
		batch = append(batch[:0], q)
		size := q.size
		for len(batch) < w.r.cfg.BatchSize && size < w.r.cfg.TransactionBytes {
			q, ok := w.next(false)
			if !ok {
				break
			}
			batch = append(batch, q)
			size += q.size
		}
		w.r.m.inFlight.Add(float64(len(batch)))
		ok = w.handle(batch)
		w.r.m.inFlight.Sub(float64(len(batch)))
		w.bytes.Add(-size)
		w.busy.Store(false)
		if !ok {
			return // abandoned: stopping
		}
	}
}

// ack stores the offset after m: everything up to m is finished (committed
// in the database, dead-lettered or parked). The committer commits stored
// offsets right after; librdkafka also commits them every
// auto.commit.interval.ms, and the runtime commits them synchronously on
// revoke and shutdown.
func (w *worker) ack(offset kafka.Offset) {
	if w.abandoned.Load() {
		return // its partition may be someone else's now
	}
	tp := w.tp
	tp.Offset = offset + 1
	if _, err := w.r.consumer.StoreOffsets([]kafka.TopicPartition{tp}); err != nil {
		w.r.log.Debug().Err(err).Int32("partition", tp.Partition).Msg("store offset failed (partition revoked?)")
	} else {
		if prev := w.stored.Swap(int64(tp.Offset)); int64(tp.Offset) < prev {
			w.commitLow.Store(true)
		}
		if w.commitLow.Load() {
			w.commitBelow(tp)
		}
		select { // the committer commits it soon
		case w.r.commitReq <- struct{}{}:
		default: // a commit is asked for already
		}
	}
	w.lastProgress.Store(time.Now().UnixNano())
}

// commitBelow commits tp's offset explicitly: an offset stored below one
// stored before (the partition's position moved back, dispatch) is one
// librdkafka's commits of stored offsets leave out while it is not above
// the offset committed last, so a restart in between would resume past
// the messages of the new position not yet handled. Once one such commit
// succeeded, the committed offset follows the stored ones again.
func (w *worker) commitBelow(tp kafka.TopicPartition) {
	if _, err := w.r.consumer.CommitOffsets([]kafka.TopicPartition{tp}); err != nil {
		w.r.log.Warn().Err(err).Int32("partition", tp.Partition).Int64("offset", int64(tp.Offset)).
			Msg("commit of an offset below the last committed failed: tried again with the next")
		return
	}
	w.commitLow.Store(false)
}

// sleep waits d, or less when the worker is stopping; it reports whether
// the worker should go on. A worker holds no lane while it waits (lanes are
// taken per transaction).
func (w *worker) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.quit:
		return false
	case <-w.ctx.Done():
		return false
	}
}

// stuck reports a partition with work that made no progress for too long.
func (w *worker) stuck(now time.Time, after time.Duration) bool {
	pending := w.busy.Load() || len(w.in) > 0 || w.paused.Load() || w.waiting.Load() != nil
	return pending && now.Sub(time.Unix(0, w.lastProgress.Load())) > after
}
