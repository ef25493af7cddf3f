package consumer

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/pin-platform/consumers/ent"
)

// item is one message on its way through the runtime.
type item struct {
	km        *kafka.Message
	msg       *Message
	decodeErr error
	route     Route
	routed    bool
	id        string          // the MessageId as text, once decoded
	key       string          // idempotency key
	start     time.Time       // handed to its worker: its duration counts the queue
	ctx       context.Context // carries the message's span
	span      trace.Span
	st        *state
	outcome   Outcome
	attempts  int
	marked    bool            // its mark was found committed: a duplicate
	log       *zerolog.Logger // the message's logger, built on first use
}

// dropHooks forgets the after-commit hooks of a rolled-back attempt.
func (it *item) dropHooks() {
	if it.st != nil {
		it.st.afterCommit = nil
	}
}

// prepare decodes a message and starts its span, continuing the W3C trace
// context of its headers; at is when the message was handed to its worker.
func (r *Runtime) prepare(km *kafka.Message, at time.Time) *item {
	it := &item{km: km, start: at}
	ctx := r.prop.Extract(context.Background(), headerCarrier(km.Headers))
	it.ctx, it.span = r.tracer.Start(ctx, r.span.name,
		trace.WithTimestamp(at), // as the duration: from the hand-over
		r.span.kind, r.span.attrs,
		trace.WithAttributes(
			attribute.Int("messaging.destination.partition.id", int(km.TopicPartition.Partition)),
			attribute.Int64("messaging.kafka.offset", int64(km.TopicPartition.Offset)),
		))
	r.decode(it)
	if it.msg != nil && it.span.IsRecording() { // not built for a tracer that is off
		it.span.SetAttributes(
			attribute.String("messaging.message.id", it.id),
			attribute.String("pin.event_type", it.msg.EventType))
	}
	r.logFor(it).Debug().Msg("consumed")
	return it
}

// decode reads the item's envelope and finds its route.
func (r *Runtime) decode(it *item) {
	km := it.km
	env, err := DecodeEnvelope(km.Value)
	if err != nil {
		it.decodeErr = err
		return
	}
	it.msg = NewMessage(env, r.svc.InvalidCode, r.cfg.MaxClockSkew)
	it.msg.Topic, it.msg.Partition, it.msg.Offset, it.msg.Key = r.svc.Topic, km.TopicPartition.Partition, int64(km.TopicPartition.Offset), km.Key
	if skew := r.cfg.MaxClockSkew; env.Problem() == nil && env.CreatedAt.After(time.Now().Add(skew)) {
		it.msg.problem = fmt.Errorf("CreatedAt %s is more than %s in the future (MAX_CLOCK_SKEW)", env.CreatedAt.Format(time.RFC3339), skew)
	}
	it.id = env.MessageID.String()
	it.route, it.routed = r.svc.route(env.EventType)
	if it.routed {
		it.key = it.route.KeyPrefix + it.id
	}
}

// probeItem decodes a queued message for a probe (probeUpcoming): no span of
// its own, no "consumed" line; it is prepared again when its turn comes.
func (r *Runtime) probeItem(km *kafka.Message) *item {
	it := &item{km: km, start: time.Now(), ctx: context.Background()}
	it.span = trace.SpanFromContext(it.ctx) // a no-op span
	r.decode(it)
	return it
}

// logFor is the message's logger: the runtime's, with the message's
// partition, offset, MessageId and EventType. It is built once per message
// (after prepare decoded it), not on every line.
func (r *Runtime) logFor(it *item) *zerolog.Logger {
	if it.log != nil {
		return it.log
	}
	l := r.log.With().
		Int32("partition", it.km.TopicPartition.Partition).
		Int64("offset", int64(it.km.TopicPartition.Offset))
	if it.msg != nil { // a producer's EventType may be anything: at most 128 bytes of it
		l = l.Str("MessageId", it.id).Str("EventType", abbreviate(it.msg.EventType, 128))
	}
	lg := l.Logger()
	if it.msg != nil || it.decodeErr != nil { // decoded (or not decodable): final
		it.log = &lg
	}
	return &lg
}

// handle processes a batch of one partition's messages in order. Runs of
// routable messages share one transaction; a run that fails in any way is
// rolled back and replayed one message at a time, where each failure gets
// its class's treatment. It reports false when the worker is stopping and
// the rest of the batch was abandoned.
func (w *worker) handle(batch []queued) bool {
	r := w.r
	items := make([]*item, len(batch))
	for i, q := range batch {
		items[i] = r.prepare(q.m, q.at)
		if it := items[i]; it.msg != nil && r.svc.ContractVersion != 0 && it.msg.ContractVersion != r.svc.ContractVersion {
			r.m.mismatch()
			r.logFor(it).Warn().Int("ContractVersion", it.msg.ContractVersion).
				Int("expected", r.svc.ContractVersion).Msg("contract-version-mismatch")
		}
	}
	w.items = items // the messages behind a failing one may be probed (probeUpcoming)
	defer func() { w.items = nil }()
	for i := 0; i < len(items); {
		j := i
		for j < len(items) && items[j].routed && items[j].msg.Problem() == nil {
			j++
		}
		var ok bool
		if j == i { // a message that cannot be routed: on its own
			j = i + 1
			ok = w.processOne(items[i], nil)
		} else {
			ok = w.runRouted(items[i:j])
		}
		if !ok {
			for _, rest := range items[i:] {
				rest.span.End()
			}
			return false
		}
		i = j
	}
	return true
}

// runRouted processes routable messages, several per transaction (a lone
// one goes through the batch path too when the service has a Prepare, else
// through processOne). With CONSUMER_SHARED_TRANSACTIONS the run first
// tries a transaction shared with other partitions' runs (share.go); if
// that is not committed, the run goes on as below, on its own.
func (w *worker) runRouted(items []*item) bool {
	if s := w.r.share; s != nil && !w.alone(items) {
		res := s.run(w, items)
		switch {
		case res.ok:
			w.settle(items)
			return true
		case res.failed >= 0: // a handler of the run failed
			return w.failedAt(items, res.failed, res.err) && w.runOwn(items[res.failed+1:])
		}
		// Not committed (nothing of it was), for a failure of another
		// run or of none: on its own, where each failure gets its
		// treatment.
	}
	return w.runOwn(items)
}

// runOwn is runRouted in transactions of w's partition alone. When a
// handler fails, the transaction is rolled back; the messages before it are
// run again (they did not fail), the failing one continues on its own with
// that failure as its first attempt, and the rest go on as a new batch.
func (w *worker) runOwn(items []*item) bool {
	for len(items) > 0 {
		if w.alone(items) {
			return w.processOne(items[0], nil)
		}
		ok, k, err := w.processBatch(items)
		if ok {
			return true
		}
		if k < 0 { // not one handler's failure (marks, commit): one at a time
			for _, it := range items {
				if !w.processOne(it, nil) {
					return false
				}
			}
			return true
		}
		if !w.failedAt(items, k, err) {
			return false
		}
		items = items[k+1:]
	}
	return true
}

// alone reports a run that takes the per-message path: a lone message of
// a service without Prepare.
func (w *worker) alone(items []*item) bool {
	return len(items) == 1 && w.r.svc.Prepare == nil
}

// failedAt goes on after the handler of items[k] failed with err in a
// transaction that was rolled back: the messages before it run again (they
// did not fail), then items[k] on its own, with that failure as its first
// attempt.
func (w *worker) failedAt(items []*item, k int, err error) bool {
	return w.runOwn(items[:k]) && w.processOne(items[k], w.firstAttempt(items[k], err))
}

// firstAttempt is what a handler's failure in a batch counts as for its
// message: its first attempt — unless the message was processed already
// (a batch inserts its marks last, so the handler of a redelivered message
// ran on the state it had itself left) or is being processed by another
// transaction right now. Then, and when that cannot be told, nil: the
// message runs again on its own, where its mark decides.
func (w *worker) firstAttempt(it *item, err error) error {
	if processed, perr := w.r.processedElsewhere(w.ctx, it); perr != nil || processed {
		return nil
	}
	return err
}

// processedElsewhere reports whether the message's mark exists, waiting
// for a transaction that holds the key uncommitted (a parked re-drive, a
// member that lost its assignment) to end, as a claim does: it claims the
// key in a transaction that it rolls back.
func (r *Runtime) processedElsewhere(ctx context.Context, it *item) (bool, error) {
	tx, err := r.client.Tx(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }()
	inserted, err := insertMarks(ctx, tx, r.svc.Group, r.svc.Topic, []mark{{it.key, it.msg.Partition, it.msg.Offset, pendingOutcome}})
	if err != nil {
		return false, err
	}
	return !inserted[it.key], nil
}

// processBatch runs messages in one transaction (several, or a lone one
// when the service has a Prepare). When it reports false everything was
// rolled back; failed is the index of the message whose handler (or a
// BeforeCommit function, through FailMessage) returned err, or -1 when the
// failure belongs to no one message. A message found already processed
// when the batch's marks are inserted is taken out and the batch run again
// (at most once per such message): it ends as a duplicate.
func (w *worker) processBatch(items []*item) (ok bool, failed int, err error) {
	if ok, failed, err = w.commitBatch(items); ok {
		w.settle(items)
	}
	return ok, failed, err
}

// settle finishes the messages of a committed batch (after-commit hooks,
// outcome line, metrics) and stores the offset after the last: all of them
// are of w's partition, in offset order.
func (w *worker) settle(items []*item) {
	for _, it := range items {
		it.attempts = 1
		w.r.committed(it)
		w.finish(it, nil)
	}
	w.ack(items[len(items)-1].km.TopicPartition.Offset)
}

// commitBatch is processBatch up to the commit: the messages may be of
// several partitions (a shared transaction), and nothing is settled.
func (w *worker) commitBatch(items []*item) (ok bool, failed int, err error) {
	ctx, span := w.r.tracer.Start(w.ctx, "db.batch", trace.WithAttributes(attribute.Int("pin.batch_size", len(items))))
	defer span.End()
	for _, it := range items {
		span.AddLink(trace.LinkFromContext(it.ctx))
	}
	races := 0
	for {
		ok, failed, again, err := w.batchTx(ctx, items, races < lostRaceRetries)
		switch again {
		case noRerun:
			return ok, failed, err
		case rerunLostRace:
			races++
		}
	}
}

// rerun says why batchTx rolled back to be run again at once.
type rerun int

const (
	noRerun               rerun = iota
	rerunWithoutProcessed       // messages found processed: flagged, left out
	rerunLostRace               // the marks' insert was a deadlock's victim
)

// batchTx is one transaction of processBatch. again says why it was rolled
// back to be run again: some of its messages turned out processed already
// (they are flagged, item.marked, and left out of the next run), or, when
// rerace allows it, its marks' insert lost a race (a deadlock with another
// processor of the same messages, which has gone on).
func (w *worker) batchTx(ctx context.Context, items []*item, rerace bool) (ok bool, failed int, again rerun, err error) {
	r := w.r
	if !w.takeTurn(nil) { // given up for a dead letter earlier in the batch
		return false, -1, noRerun, nil
	}
	tx, err := r.client.Tx(ctx)
	if err != nil {
		return false, -1, noRerun, nil
	}
	run := make([]bool, len(items))
	seen := make(map[string]bool, len(items))
	var msgs []*Message
	for i, it := range items {
		it.outcome, it.st = "", nil
		if it.marked || seen[it.key] { // the same MessageId twice in one batch: run once
			seen[it.key] = true
			it.outcome = SkippedDuplicate
			continue
		}
		seen[it.key] = true
		run[i] = true
		msgs = append(msgs, it.msg)
	}
	hctx := ctx
	b := &batch{}
	if r.svc.Prepare != nil && len(msgs) > 0 {
		if err = r.guarded("prepare", func() (err error) {
			hctx, err = r.svc.Prepare(context.WithValue(ctx, batchKey{}, b), tx, msgs)
			return err
		}); err != nil {
			_ = tx.Rollback()
			r.log.Info().Err(err).Int("batch", len(items)).Msg("batch prepare failed: one message at a time")
			return false, -1, noRerun, nil
		}
		if hctx == nil {
			hctx = ctx
		}
	}
	marks := make([]mark, 0, len(msgs))
	for i, it := range items {
		if !run[i] {
			continue
		}
		out, err := r.call(hctx, tx, it)
		if err != nil {
			_ = tx.Rollback()
			return false, i, noRerun, err
		}
		it.outcome = out
		marks = append(marks, mark{it.key, it.msg.Partition, it.msg.Offset, out})
	}
	for _, fn := range b.beforeCommit {
		if err := r.guarded("before-commit", func() error { return fn(hctx) }); err != nil {
			_ = tx.Rollback()
			var mf *messageFailure
			if errors.As(err, &mf) {
				for i, it := range items {
					if run[i] && it.msg == mf.msg {
						return false, i, noRerun, mf.err
					}
				}
			}
			r.log.Info().Err(err).Int("batch", len(items)).Msg("batch write failed: one message at a time")
			return false, -1, noRerun, nil
		}
	}
	if len(marks) > 0 {
		inserted, err := insertMarks(ctx, tx, r.svc.Group, r.svc.Topic, marks)
		if err != nil {
			_ = tx.Rollback()
			if c := lostRace(err); c != "" && rerace {
				r.m.retry(Infrastructure, c)
				r.m.batchReruns.WithLabelValues("lost-race").Inc()
				r.log.Info().Err(err).Int("batch", len(items)).Msg("batch marks lost a race: again")
				return false, -1, rerunLostRace, nil
			}
			return false, -1, noRerun, nil
		}
		if len(inserted) < len(marks) {
			_ = tx.Rollback()
			n := 0
			for i, it := range items {
				if run[i] && !inserted[it.key] {
					it.marked = true
					n++
				}
			}
			r.m.batchReruns.WithLabelValues("processed-already").Inc()
			r.log.Debug().Int("batch", len(items)).Int("processed_already", n).Msg("batch met processed messages: again without them")
			return false, -1, rerunWithoutProcessed, nil
		}
	}
	if err := tx.Commit(); err != nil {
		return false, -1, noRerun, nil
	}
	r.m.batchSize.Observe(float64(len(items)))
	return true, -1, noRerun, nil
}

// guarded runs a service's batch hook (Prepare, a BeforeCommit function). A
// panic becomes an error, logged with its stack: the batch is then replayed
// one message at a time, where a handler's panic dead-letters its message,
// instead of the process crashing on the same batch after every restart.
func (r *Runtime) guarded(what string, fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error().Str("panic", fmt.Sprint(p)).Str("stack", string(debug.Stack())).Msg(what + " panicked")
			err = fmt.Errorf("%s panicked: %v", what, p)
		}
	}()
	return fn()
}

// call runs the route's handler for one attempt, with a fresh per-attempt
// state. A panic is turned into an error of the service's invalid code: the
// message goes to the DLQ (where it can be replayed after a fix) instead of
// crashing the process or stalling the partition.
func (r *Runtime) call(ctx context.Context, tx *ent.Tx, it *item) (out Outcome, err error) {
	it.st = &state{}
	defer func() {
		if p := recover(); p != nil {
			r.logFor(it).Error().Str("panic", fmt.Sprint(p)).Str("stack", string(debug.Stack())).Msg("handler panicked")
			err = r.svc.InvalidCode.Errorf("handler panicked: %v", p)
		}
	}()
	ctx = trace.ContextWithSpan(ctx, it.span)
	ctx = r.logFor(it).WithContext(ctx)
	return it.route.Handle(withState(ctx, it.st), tx, it.msg)
}

// handleIn claims the message's mark, runs its handler and settles the mark,
// all in tx. claimed is false when the mark existed already: a duplicate,
// nothing else was done and the caller rolls back. (A handler may report
// SkippedDuplicate itself — a second idempotency layer of its own — and
// that outcome is committed with its mark like any other.)
func (r *Runtime) handleIn(ctx context.Context, tx *ent.Tx, it *item) (out Outcome, claimed bool, err error) {
	m := mark{it.key, it.msg.Partition, it.msg.Offset, pendingOutcome}
	keys, err := insertMarks(ctx, tx, r.svc.Group, r.svc.Topic, []mark{m})
	if err != nil {
		return "", false, err
	}
	if !keys[it.key] {
		it.st = nil
		return SkippedDuplicate, false, nil
	}
	out, err = r.call(ctx, tx, it)
	if err != nil {
		return "", true, err
	}
	m.outcome = out
	return out, true, settleMark(ctx, tx, m)
}

// attempt processes one message in its own transaction.
func (w *worker) attempt(it *item) (Outcome, error) {
	r := w.r
	ctx, span := r.tracer.Start(trace.ContextWithSpan(w.ctx, it.span), "db.transaction")
	defer span.End()
	if !w.takeTurn(nil) { // given up for a dead letter or a backoff
		return "", w.ctx.Err()
	}
	tx, err := r.client.Tx(ctx)
	if err != nil {
		return "", err
	}
	out, claimed, err := r.handleIn(ctx, tx, it)
	if err != nil || !claimed {
		_ = tx.Rollback()
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		return out, err
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("commit: %w", err)
	}
	return out, nil
}

// finish ends a message that reached a final state: after-commit hooks,
// metrics, the outcome log line, the span.
func (w *worker) finish(it *item, err error) {
	w.r.finish(it, err)
}

func (r *Runtime) finish(it *item, err error) {
	if it.st != nil {
		for _, fn := range it.st.afterCommit {
			r.runHook(it, fn)
		}
	}
	eventType := UnknownEventType // a label from a closed set, never the producer's text
	if it.routed {
		eventType = it.route.EventType
	}
	if it.msg != nil && it.msg.Problem() == nil {
		r.m.eventTime(it.msg.CreatedAt)
	}
	d := time.Since(it.start)
	r.m.finished(eventType, it.outcome, d)
	var ev *zerolog.Event
	switch {
	case it.outcome == DeadLettered:
		ev = r.logFor(it).Error().Err(err)
		it.span.SetStatus(codes.Error, err.Error())
	case it.outcome == SkippedUnknownEventType:
		ev = r.logFor(it).Warn()
	case err != nil: // parked: the reason it waits
		ev = r.logFor(it).Info().Str("reason", err.Error())
	default:
		ev = r.logFor(it).Info()
	}
	if c, ok := CodeOf(err); ok {
		ev = ev.Str("code", c.Name)
	}
	if it.st != nil {
		for _, f := range it.st.fields {
			f(ev)
		}
	}
	ev.Str("outcome", string(it.outcome)).Int("attempts", it.attempts).
		Float64("duration_ms", float64(d)/float64(time.Millisecond)).Msg(string(it.outcome))
	it.span.SetAttributes(attribute.String("pin.outcome", string(it.outcome)))
	it.span.End()
}

// runHook runs an after-commit hook; a panicking hook is logged, not
// allowed to take the process down between the commit and the offset.
// Hooks run at most once: a crash after the commit loses them.
func (r *Runtime) runHook(it *item, fn func()) {
	defer func() {
		if p := recover(); p != nil {
			r.logFor(it).Error().Str("panic", fmt.Sprint(p)).Str("stack", string(debug.Stack())).Msg("after-commit hook panicked")
		}
	}()
	fn()
}

// deadLetter publishes the message to the DLQ, waits for the broker's
// acknowledgement and acknowledges the source offset. A failed publish is
// an infrastructure error: retried with backoff, never skipped.
func (w *worker) deadLetter(it *item, code Code, cause error, attempts int) bool {
	r := w.r
	infra := newInfraBackoff()
	// Publishing needs no transaction: the turn goes to the other
	// partitions while the broker is awaited (minutes, in a Kafka outage).
	// The next transaction of this worker takes one again.
	w.giveTurn()
	for {
		err := r.dlq.send(w.ctx, it.km, code, cause.Error(), attempts)
		if err == nil {
			break
		}
		if w.ctx.Err() != nil {
			return false
		}
		d := r.cfg.scale(infra.NextBackOff())
		r.m.retry(Infrastructure, "DLQ_PUBLISH")
		r.m.infra("kafka")
		r.logFor(it).Warn().Err(err).Dur("retry_in", d).Msg("dlq publish failed")
		if !w.sleep(d) {
			return false
		}
	}
	r.m.deadLettered(code.Name)
	it.outcome = DeadLettered
	it.attempts = attempts
	it.dropHooks() // the attempt rolled back: keep its log fields, not its hooks
	if c, ok := CodeOf(cause); !ok || c.Name != code.Name {
		cause = &Error{Code: code, Err: cause}
	}
	r.finish(it, cause)
	w.ack(it.km.TopicPartition.Offset)
	return true
}

func newInfraBackoff() *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = time.Second
	b.MaxInterval = 60 * time.Second
	b.Multiplier = 2
	b.RandomizationFactor = 0.2
	b.Reset()
	return b
}

// headerCarrier adapts Kafka headers to OpenTelemetry's TextMapCarrier.
type headerCarrier []kafka.Header

func (h headerCarrier) Get(key string) string {
	for _, x := range h {
		if x.Key == key {
			return string(x.Value)
		}
	}
	return ""
}
func (h headerCarrier) Set(string, string) {}
func (h headerCarrier) Keys() []string {
	ks := make([]string, len(h))
	for i, x := range h {
		ks[i] = x.Key
	}
	return ks
}
