package consumer

import (
	"cmp"
	"context"
	stdsql "database/sql"
	"errors"
	"strings"
	"time"

	entsql "entgo.io/ent/dialect/sql"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/ent/parkedmessage"
	"github.com/pin-platform/pin/schema"
)

// Retry-later, durably: a message whose precondition does not hold yet (its
// chat or lead does not exist) is parked in parked_messages, in a
// transaction that commits before its offset is stored. The partition goes
// on with the next message; the re-driver runs parked messages again when
// their time comes, on the code's backoff schedule, and dead-letters them
// when the schedule is spent. Any member of the group may re-drive any
// parked row (FOR UPDATE SKIP LOCKED), so waits survive restarts and
// rebalances. This is only correct for consumers whose messages may apply
// out of line (self-sufficient versioned snapshots, append-only feeds);
// a consumer whose order matters sets Service.Blocking instead.

// park stores the message for a later retry and acknowledges it. step is
// the number of retry-later retries used with this one; delay is the wait
// before it. ok is false when the worker is stopping; inLine is true when
// the message could not be parked (errParkedByAnother) and, its delay
// waited, goes on in line.
func (w *worker) park(it *item, code Code, cause error, step int, delay time.Duration) (ok, inLine bool) {
	r := w.r
	next := time.Now().Add(delay)
	err, ok := w.persist(it, "park", code.Name, "park", func() error {
		err := r.parkRow(w.ctx, it, code, cause, step, next)
		for errors.Is(err, errParkRowGone) { // re-driven and deleted meanwhile: park again
			err = r.parkRow(w.ctx, it, code, cause, step, next)
		}
		return err
	}, func(err error) bool {
		c, ok := classify(err, r.svc.InvalidCode)
		return errors.Is(err, errParkedByAnother) || ok && c.Class == Invalid
	})
	switch {
	case !ok:
		return false, false
	case errors.Is(err, errParkedByAnother):
		r.logFor(it).Warn().Err(err).Str("code", code.Name).Dur("retry_in", delay).Msg("cannot park: waiting in line instead")
		it.inLine = true
		return w.sleep(delay), true
	case err != nil:
		// The row cannot be written (a value PostgreSQL refuses): the
		// message cannot wait, it goes to the DLQ with its own code.
		return w.deadLetter(it, code, cause, it.attempts), false
	}
	w.release()
	r.m.parked.WithLabelValues(code.Name).Inc()
	r.m.retry(RetryLater, code.Name)
	r.ended(it, Parked, code, cause)
	w.ack(it.km.TopicPartition.Offset)
	return true, false
}

// cleanText makes s storable as PostgreSQL text: valid UTF-8, no NUL, and
// at most 2000 bytes.
func cleanText(s string) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "?"), "\x00", "")
	return abbreviate(s, 2000)
}

func (r *Runtime) parkRow(ctx context.Context, it *item, code Code, cause error, step int, next time.Time) error {
	hs := make([]schema.Header, len(it.km.Headers))
	for i, h := range it.km.Headers {
		hs[i] = schema.Header{Key: h.Key, Value: h.Value}
	}
	c := r.client.ParkedMessage.Create().
		SetConsumerGroup(r.svc.Group).
		SetTopic(r.svc.Topic).
		SetPartition(it.km.TopicPartition.Partition).
		SetOffset(int64(it.km.TopicPartition.Offset)).
		SetHeaders(hs).
		SetMessageID(it.msg.MessageID).
		SetEventType(cleanText(it.msg.EventType)).
		SetErrorCode(code.Name).
		SetReason(cleanText(cause.Error())).
		SetAttempts(it.attempts).
		SetScheduleStep(step).
		SetNextAttemptAt(next)
	if it.km.Key != nil {
		c.SetKey(it.km.Key)
	}
	if it.km.Value != nil {
		c.SetValue(it.km.Value)
	}
	err := c.OnConflictColumns(parkedmessage.FieldConsumerGroup, parkedmessage.FieldTopic,
		parkedmessage.FieldPartition, parkedmessage.FieldOffset).DoNothing().Exec(ctx)
	if errors.Is(err, stdsql.ErrNoRows) || ent.IsNotFound(err) {
		// A row holds the message's coordinates already: a redelivery of
		// a message we parked, or another message's (a topic recreated,
		// a replay to an offset a row still holds).
		held, err := r.client.ParkedMessage.Query().Where(
			parkedmessage.ConsumerGroup(r.svc.Group), parkedmessage.Topic(r.svc.Topic),
			parkedmessage.Partition(it.km.TopicPartition.Partition), parkedmessage.Offset(int64(it.km.TopicPartition.Offset))).
			Select(parkedmessage.FieldMessageID).String(ctx)
		switch {
		case ent.IsNotFound(err):
			return errParkRowGone // re-driven and deleted meanwhile: park again
		case err != nil:
			return err
		case held != it.msg.MessageID.String():
			return errParkedByAnother
		}
		return nil
	}
	return err
}

// errParkedByAnother: another message's row holds this message's source
// coordinates (a stale row of a recreated topic, or of a replay to an
// offset a row still holds). That row stays for its own re-drive; this
// message cannot be parked beside it (the row's key is its coordinates),
// so it waits in line instead, as in a Blocking service.
var errParkedByAnother = errors.New("another message's parked row holds this message's source offset")

// errParkRowGone: the row that held the coordinates was deleted between
// the insert and the read; the park is tried again.
var errParkRowGone = errors.New("the parked row at this message's offset went away meanwhile")

// redriveLoop re-runs due parked messages until ctx ends.
func (r *Runtime) redriveLoop(ctx context.Context) {
	tick := r.cfg.scale(r.cfg.ParkedPoll)
	if tick < 10*time.Millisecond {
		tick = 10 * time.Millisecond
	}
	if tick > r.cfg.ParkedPoll {
		tick = r.cfg.ParkedPoll
	}
	infra := newInfraBackoff()
	wait := tick
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = tick
		for ctx.Err() == nil {
			found, err := r.redriveOne(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				wait = r.cfg.scale(infra.NextBackOff())
				if !errors.As(err, new(*postponed)) { // an attempt's failure is counted and logged by settle
					r.m.retry(Infrastructure, "")
					r.log.Warn().Err(err).Dur("retry_in", wait).Msg("re-drive of parked messages failed")
				}
				break
			}
			infra.Reset()
			if !found {
				break
			}
		}
	}
}

// redriveOne runs the oldest due parked message of the group, if any, and
// reports whether there was one. Its row stays locked for the attempts
// (settle, with the row as holder): the message runs under a savepoint, so
// that a failed attempt can still reschedule or remove the row in the same
// transaction. A row whose attempt fails for a reason it must wait out (the
// database went away, an unexpected error) is pushed back by the
// infrastructure backoff in a statement of its own, so that it never holds
// up the rows behind it; the error is then the attempt's (*postponed).
func (r *Runtime) redriveOne(ctx context.Context) (bool, error) {
	tx, err := r.client.Tx(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }() // no-op after commit
	row, err := tx.ParkedMessage.Query().
		Where(parkedmessage.ConsumerGroup(r.svc.Group), parkedmessage.NextAttemptAtLTE(time.Now())).
		Order(ent.Asc(parkedmessage.FieldNextAttemptAt)).
		Limit(1).
		ForUpdate(entsql.WithLockAction(entsql.SkipLocked)).
		First(ctx)
	if ent.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	it := r.prepare(parkedToKafka(row), time.Now())
	defer it.span.End() // no-op once finished
	h := &inRow{r: r, ctx: ctx, tx: tx, row: row}
	switch {
	case it.msg == nil: // cannot happen for a row we parked; never loop on it
		h.deadLetter(it, EnvelopeInvalid, cmp.Or(it.decodeErr, errors.New("parked message cannot be decoded")))
	case !it.routed:
		// Parked by a release that routes its EventType, met by one that
		// does not (an old pod during a rolling update, a rollback): left
		// for a release that does, never deleted or dead-lettered.
		h.leaveForAnotherRelease(it)
	default:
		// Its tally so far, from the row: the retry-later steps used, and
		// the unexpected failures, the last of them when the row was last
		// written (the evidence must be newer).
		it.attempts = row.Attempts
		t := newTally()
		t.step, t.unexpected, t.since = row.ScheduleStep, row.UnexpectedFailures, row.UpdatedAt.UnixNano()
		r.settle(h, it, t, nil)
	}
	if h.err != nil {
		return true, &postponed{h.err}
	}
	return true, ctx.Err()
}

// postponed is the failure a parked row was pushed back for.
type postponed struct{ err error }

func (e *postponed) Error() string { return e.err.Error() }
func (e *postponed) Unwrap() error { return e.err }

// postpone pushes a row whose attempt failed without a verdict back by the
// infrastructure backoff (by how often that happened), outside the failed
// transaction.
// unexpected is the row's count of unexpected failures with this one.
func (r *Runtime) postpone(ctx context.Context, row *ent.ParkedMessage, attempts, unexpected int, cause error) {
	n := attempts - row.ScheduleStep // attempts that were not retry-later
	b := newInfraBackoff()
	d := b.NextBackOff()
	for i := 1; i < n && i < 10; i++ {
		d = b.NextBackOff()
	}
	r.logFor(&item{km: parkedToKafka(row)}).Warn().Err(cause).Dur("retry_in", r.cfg.scale(d)).
		Int("attempts", attempts).Msg("re-drive failed: postponed")
	_ = r.client.ParkedMessage.UpdateOneID(row.ID).
		SetAttempts(max(attempts, row.Attempts)).
		SetUnexpectedFailures(unexpected).
		SetNextAttemptAt(time.Now().Add(r.cfg.scale(d))).
		SetReason(cleanText(cause.Error())).
		SetUpdatedAt(time.Now()).
		Exec(ctx)
}

func parkedToKafka(p *ent.ParkedMessage) *kafka.Message {
	topic := p.Topic
	km := &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: p.Partition, Offset: kafka.Offset(p.Offset)},
	}
	if p.Key != nil {
		km.Key = *p.Key
	}
	if p.Value != nil {
		km.Value = *p.Value
	}
	for _, h := range p.Headers {
		km.Headers = append(km.Headers, kafka.Header{Key: h.Key, Value: h.Value})
	}
	return km
}
