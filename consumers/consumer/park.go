package consumer

import (
	"context"
	stdsql "database/sql"
	"errors"
	"fmt"
	"time"

	entsql "entgo.io/ent/dialect/sql"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pin-platform/consumers/ent"
	"github.com/pin-platform/consumers/ent/parkedmessage"
	"github.com/pin-platform/consumers/schema"
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

// park stores the message for a later retry and acknowledges it.
func (w *worker) park(it *item, code Code, cause error) bool {
	r := w.r
	infra := newInfraBackoff()
	next := time.Now().Add(r.cfg.scale(code.Backoff[0]))
	for {
		err := r.parkRow(w.ctx, it, code, cause, next)
		if err == nil {
			break
		}
		if w.ctx.Err() != nil {
			return false
		}
		d := r.cfg.scale(infra.NextBackOff())
		r.m.retry(Infrastructure, code.Name)
		r.logFor(it).Warn().Err(err).Dur("retry_in", d).Msg("park failed")
		if !w.sleep(d) {
			return false
		}
	}
	r.m.parked.WithLabelValues(code.Name).Inc()
	r.m.retry(RetryLater, code.Name)
	it.outcome = Parked
	it.dropHooks() // the attempt rolled back: keep its log fields, not its hooks
	r.logFor(it).Info().Str("code", code.Name).Str("reason", cause.Error()).Time("next_attempt_at", next).
		Int("attempts", it.attempts).Msg("retry-later")
	r.finish(it, nil)
	w.ack(it.km.TopicPartition.Offset)
	return true
}

func (r *Runtime) parkRow(ctx context.Context, it *item, code Code, cause error, next time.Time) error {
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
		SetEventType(it.msg.EventType).
		SetErrorCode(code.Name).
		SetReason(cause.Error()).
		SetAttempts(it.attempts).
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
		return nil // parked already: a redelivery of a message we parked
	}
	return err
}

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
// reschedule or remove the row in the same transaction.
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
	it := r.prepare(parkedToKafka(row))
	if it.msg == nil || !it.routed { // cannot happen for a row we parked; never loop on it
		if err := r.dlq.send(ctx, it.km, EnvelopeInvalid, "parked message cannot be routed", row.Attempts); err != nil {
			return true, err
		}
		if err := tx.ParkedMessage.DeleteOne(row).Exec(ctx); err != nil {
			return true, err
		}
		return true, tx.Commit()
	}
	it.attempts = row.Attempts
	retried := 0
	for {
		it.attempts++
		out, err := r.redriveAttempt(ctx, tx, it)
		if err == nil {
			if err := tx.ParkedMessage.DeleteOne(row).Exec(ctx); err != nil {
				return true, err
			}
			if err := tx.Commit(); err != nil {
				return true, err
			}
			it.outcome = out
			r.finish(it, nil)
			return true, nil
		}
		code, known := classify(err, r.svc.InvalidCode)
		if !known || code.Class == Infrastructure {
			it.span.End()
			return true, err
		}
		if code.Class == RetryNow && retried < r.svc.retryNow() {
			retried++
			r.m.retry(RetryNow, code.Name)
			continue
		}
		if code.Class == RetryLater {
			if n := it.attempts - 1; n < len(code.Backoff) {
				next := time.Now().Add(r.cfg.scale(code.Backoff[n]))
				if err := tx.ParkedMessage.UpdateOne(row).
					SetAttempts(it.attempts).
					SetNextAttemptAt(next).
					SetErrorCode(code.Name).
					SetReason(err.Error()).
					SetUpdatedAt(time.Now()).
					Exec(ctx); err != nil {
					return true, err
				}
				if err := tx.Commit(); err != nil {
					return true, err
				}
				r.m.retry(RetryLater, code.Name)
				r.logFor(it).Info().Str("code", code.Name).Str("reason", err.Error()).
					Int("attempts", it.attempts).Time("next_attempt_at", next).Msg("retry-later")
				it.span.End()
				return true, nil
			}
		}
		// Invalid, retry-now spent, or retry-later schedule spent.
		if err := r.dlq.send(ctx, it.km, code, err.Error(), it.attempts); err != nil {
			it.span.End()
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
		it.dropHooks() // the attempt rolled back: keep its log fields, not its hooks
		if _, ok := CodeOf(err); !ok {
			err = code.Wrap(err)
		}
		r.finish(it, err)
		return true, nil
	}
}

// redriveAttempt is attempt() inside the re-driver's transaction, under a
// savepoint.
func (r *Runtime) redriveAttempt(ctx context.Context, tx *ent.Tx, it *item) (Outcome, error) {
	if _, err := tx.ExecContext(ctx, "SAVEPOINT redrive"); err != nil {
		return "", err
	}
	out, err := func() (Outcome, error) {
		seen, err := seenKeys(ctx, tx, []string{it.key})
		if err != nil {
			return "", err
		}
		if seen[it.key] {
			it.st = nil
			return SkippedDuplicate, nil
		}
		out, err := r.call(ctx, tx, it)
		if err != nil {
			return "", err
		}
		n, err := insertMarks(ctx, tx, r.svc.Group, r.svc.Topic, []mark{{it.key, it.msg.Partition, it.msg.Offset, out}})
		if err != nil {
			return "", err
		}
		if n == 0 {
			it.st = nil
			return SkippedDuplicate, nil
		}
		return out, nil
	}()
	if err != nil {
		if _, rbErr := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT redrive"); rbErr != nil {
			return "", fmt.Errorf("%w (and rollback to savepoint: %v)", err, rbErr)
		}
		return "", err
	}
	_, err = tx.ExecContext(ctx, "RELEASE SAVEPOINT redrive")
	return out, err
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
