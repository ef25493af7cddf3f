package consumer

import (
	"context"
	stdsql "database/sql"
	"errors"
	"strings"
	"time"

	entsql "entgo.io/ent/dialect/sql"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/ent/parkedmessage"
	"github.com/pin-platform/pin/ent/processedmessage"
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
	infra := newInfraBackoff()
	next := time.Now().Add(delay)
	for {
		err := r.parkRow(w.ctx, it, code, cause, step, next)
		if err == nil {
			break
		}
		if w.ctx.Err() != nil {
			return false, false
		}
		if errors.Is(err, errParkRowGone) {
			continue
		}
		if errors.Is(err, errParkedByAnother) {
			r.logFor(it).Warn().Err(err).Str("code", code.Name).Dur("retry_in", delay).Msg("cannot park: waiting in line instead")
			it.inLine = true
			return w.sleep(delay), true
		}
		if c, ok := classify(err, r.svc.InvalidCode); ok && c.Class == Invalid {
			// The row cannot be written (a value PostgreSQL refuses): the
			// message cannot wait, it goes to the DLQ with its own code.
			return w.deadLetter(it, code, cause, it.attempts), false
		}
		d := r.cfg.scale(infra.NextBackOff())
		r.m.retry(Infrastructure, code.Name)
		held := infraCause(err)
		if held != "" {
			r.m.infra(held)
		} else {
			held = "park" // not a cause the runtime knows, but the partition waits on it all the same
		}
		w.hold(held, err)
		r.logFor(it).Warn().Err(err).Dur("retry_in", d).Msg("park failed")
		if !w.sleep(d) {
			return false, false
		}
	}
	w.release()
	r.m.parked.WithLabelValues(code.Name).Inc()
	r.m.retry(RetryLater, code.Name)
	it.outcome = Parked
	it.dropHooks()
	if c, ok := CodeOf(cause); !ok || c.Name != code.Name {
		cause = &Error{Code: code, Err: cause}
	}
	r.finish(it, cause)
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
				r.m.retry(Infrastructure, "")
				r.log.Warn().Err(err).Dur("retry_in", wait).Msg("re-drive of parked messages failed")
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
// reports whether there was one. Its row stays locked for the attempt; the
// handler runs under a savepoint so that a failed attempt can still
// reschedule or remove the row in the same transaction. A row whose attempt
// fails for a reason the runtime cannot act on (the database went away, an
// unexpected error) is pushed back by the infrastructure backoff in a
// statement of its own, so that it never holds up the rows behind it.
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
	fail := func(err error) (bool, error) {
		_ = tx.Rollback()
		r.postpone(ctx, row, it.attempts, row.UnexpectedFailures, err)
		return true, err
	}
	if it.msg == nil || !it.routed { // cannot happen for a row we parked; never loop on it
		return r.redriveDeadLetter(ctx, tx, row, it, EnvelopeInvalid, errors.New("parked message cannot be routed"))
	}
	it.attempts = row.Attempts
	t := newTally()
	t.step = row.ScheduleStep
	for {
		it.attempts++
		started := time.Now().UnixNano()
		// The message's transaction under a savepoint of the re-driver's:
		// its effect and the row's removal commit together.
		res := r.runTx(ctx, []*item{it}, txMode{outer: tx})
		err := res.err
		if res.committed {
			if err := tx.ParkedMessage.DeleteOne(row).Exec(ctx); err != nil {
				return fail(err)
			}
			if err := tx.Commit(); err != nil {
				return fail(err)
			}
			r.committed(it)
			r.finish(it, nil)
			return true, nil
		}
		if ctx.Err() != nil {
			return true, ctx.Err()
		}
		if done, merr := r.markedSince(ctx, tx, it, res); merr != nil {
			return fail(merr)
		} else if done {
			if err := tx.ParkedMessage.DeleteOne(row).Exec(ctx); err != nil {
				return fail(err)
			}
			if err := tx.Commit(); err != nil {
				return fail(err)
			}
			it.outcome, it.st = SkippedDuplicate, nil
			r.finish(it, nil)
			return true, nil
		}
		v := r.decide(err, t, true)
		code := v.code
		switch v.act {
		case actRetry:
			r.m.retry(code.Class, code.Name)
			continue
		case actWait, actCheck:
			if v.cause != "" { // the world's: back off this row only
				r.m.infra(v.cause)
				return fail(err)
			}
			// Unexpected: counted on the row, so that a message that keeps
			// failing is not re-driven forever. From the limit on, it is
			// dead-lettered when another message of its route committed
			// after its previous failure and before this attempt: the
			// failure is its own (as in processOne).
			n := row.UnexpectedFailures + 1
			if lc := r.lastCommitOf(it.route); n >= unexpectedLimit && lc > row.UpdatedAt.UnixNano() && lc < started {
				r.logFor(it).Error().Err(err).Int("attempts", it.attempts).
					Msg("the failure is the parked message's own (other messages of its event type succeed): dead-lettering it")
				return r.redriveDeadLetter(ctx, tx, row, it, ProcessingFailed, err)
			}
			_ = tx.Rollback()
			r.postpone(ctx, row, it.attempts, n, err)
			return true, err
		case actPark:
			next := time.Now().Add(v.delay)
			if uerr := tx.ParkedMessage.UpdateOne(row).
				SetAttempts(it.attempts).
				SetScheduleStep(t.step).
				SetNextAttemptAt(next).
				SetErrorCode(code.Name).
				SetReason(cleanText(err.Error())).
				SetUpdatedAt(time.Now()).
				Exec(ctx); uerr != nil {
				return fail(uerr)
			}
			if cerr := tx.Commit(); cerr != nil {
				return fail(cerr)
			}
			r.m.retry(RetryLater, code.Name)
			r.logFor(it).Info().Str("code", code.Name).Str("reason", err.Error()).
				Int("attempts", it.attempts).Time("next_attempt_at", next).Msg("retry-later")
			return true, nil
		case actDeadLetter:
			return r.redriveDeadLetter(ctx, tx, row, it, code, err)
		}
	}
}

// markedSince reports whether the parked message's mark exists although
// its attempt just failed on it (res): a redelivered copy was applied after it
// was parked (a restart before the offset commit), and the handler failed
// on the state that copy left. The row is then done, as a duplicate — not
// an attempt that could end in the DLQ. The mark is read in the
// re-driver's transaction: waiting for an uncommitted holder from another
// one (processedElsewhere) while this one holds the row could deadlock
// where PostgreSQL cannot see it; a holder that commits later is found by
// the row's next attempt.
func (r *Runtime) markedSince(ctx context.Context, tx *ent.Tx, it *item, res txResult) (bool, error) {
	if res.failed != it {
		return false, nil
	}
	return tx.ProcessedMessage.Query().Where(processedmessage.ID(it.key)).Exist(ctx)
}

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

// redriveDeadLetter publishes a parked message to the DLQ, then deletes its
// row. A DLQ publish that succeeded before a failed delete leaves the row
// to be dead-lettered again: DLQ records are at least once (readers dedupe
// on x-source-topic, x-original-partition, x-original-offset).
func (r *Runtime) redriveDeadLetter(ctx context.Context, tx *ent.Tx, row *ent.ParkedMessage, it *item, code Code, cause error) (bool, error) {
	if err := r.dlq.send(ctx, it.km, code, r.redact(cause.Error()), it.attempts); err != nil {
		_ = tx.Rollback()
		r.m.infra("kafka")
		r.postpone(ctx, row, it.attempts, row.UnexpectedFailures, err)
		return true, err
	}
	if err := tx.ParkedMessage.DeleteOne(row).Exec(ctx); err != nil {
		return true, err
	}
	if err := tx.Commit(); err != nil {
		return true, err
	}
	r.m.deadLettered(code.Name)
	it.outcome = DeadLettered
	if it.attempts < row.Attempts {
		it.attempts = row.Attempts
	}
	it.dropHooks()
	if c, ok := CodeOf(cause); !ok || c.Name != code.Name {
		cause = &Error{Code: code, Err: cause}
	}
	r.finish(it, cause)
	return true, nil
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
