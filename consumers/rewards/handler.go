package rewards

import (
	"context"
	stdsql "database/sql"
	"errors"
	"fmt"
	"time"

	"entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/ent/referralbondreplica"
)

// handler holds the business logic of both routes. The runtime owns the
// transaction, the idempotency mark, the offset, retries and the DLQ.
type handler struct{ m *metrics }

// bondCreated applies a pin.referral.bond-created.
func (h *handler) bondCreated(ctx context.Context, tx *ent.Tx, m *consumer.Message) (consumer.Outcome, error) {
	p, err := decodeCreated(m)
	if err != nil {
		return "", err
	}
	at, err := eventTime(m)
	if err != nil {
		return "", err
	}
	lf := &bondLog{bondID: p.BondID, referredUserID: p.ReferredUserID, version: p.Version}
	consumer.LogFields(ctx, lf.fields)
	log := zerolog.Ctx(ctx) // the runtime logged "consumed"; the outcome line gets lf

	ev := Event{Type: BondCreatedEvent, Version: p.Version, ReferredUserID: p.ReferredUserID}
	for pass := 1; ; pass++ {
		row, err := lockRow(ctx, tx, p.BondID)
		if err != nil {
			return "", err
		}
		lf.setRow(row)
		switch a := Decide(rowOf(row), ev); a {
		case ActionInsert:
			if rs := batchRows(ctx); rs != nil { // inserted at the end of the batch
				if holder := rs.activeOf(p.ReferredUserID); holder != nil {
					return "", activeConflictOf(p, holder)
				}
				rs.queueInsert(newRow(p, at))
				lf.setApplied(StatusActive)
				return OutcomeCreated, nil
			}
			inserted, err := insertActive(ctx, tx, p, at)
			if err != nil {
				return "", err
			}
			if inserted {
				lf.setApplied(StatusActive)
				return OutcomeCreated, nil
			}
			// Nothing inserted: either the bond itself appeared since we
			// looked (a concurrent processor of the same message): decide
			// again on its row; or another bond is Active for the
			// referred user (BND-3).
			exists, err := tx.ReferralBondReplica.Query().Where(referralbondreplica.ID(p.BondID)).Exist(ctx)
			if err != nil {
				return "", err
			}
			if exists && pass == 1 {
				continue
			}
			if exists {
				return "", fmt.Errorf("bond-created for BondId %s: the row keeps changing under a concurrent writer", p.BondID)
			}
			return "", activeConflict(ctx, tx, p)
		case ActionUpdate:
			row.ReplicaVersion, row.SyncedAt = p.Version, at
			if err := writeRow(ctx, tx, row); err != nil {
				return "", err
			}
			lf.setApplied(Status(row.Status))
			if diffs := immutableDiffs(row, p); len(diffs) > 0 {
				consumer.AfterCommit(ctx, func() {
					log.Warn().Func(lf.fields).Strs("differs", diffs).Msg("immutable-field-differs")
				})
			}
			return OutcomeUpdated, nil
		case ActionSkipStale:
			h.skippedStale(ctx, ev.Type)
			return consumer.SkippedStale, nil
		case ActionInvalidTerminal:
			return "", CodeInvalid.Errorf("bond-created for BondId %s (Version %d) on a row in status %s (replica_version %d): a closed bond never returns to Active (BND-4)",
				p.BondID, p.Version, row.Status, row.ReplicaVersion)
		default:
			return "", fmt.Errorf("bond-created for BondId %s: unexpected action %s", p.BondID, a)
		}
	}
}

// bondClosed applies a pin.referral.bond-closed.
func (h *handler) bondClosed(ctx context.Context, tx *ent.Tx, m *consumer.Message) (consumer.Outcome, error) {
	p, err := decodeClosed(m)
	if err != nil {
		return "", err
	}
	at, err := eventTime(m)
	if err != nil {
		return "", err
	}
	lf := &bondLog{bondID: p.BondID, referredUserID: p.ReferredUserID, version: p.Version,
		eventStatus: string(p.Status), replacedBy: p.ReplacedByBondID}
	consumer.LogFields(ctx, lf.fields)
	log := zerolog.Ctx(ctx) // the runtime logged "consumed"; the outcome line gets lf

	row, err := lockRow(ctx, tx, p.BondID)
	if err != nil {
		return "", err
	}
	lf.setRow(row)
	ev := Event{Type: BondClosedEvent, Version: p.Version, ReferredUserID: p.ReferredUserID}
	switch a := Decide(rowOf(row), ev); a {
	case ActionClose:
		row.Status, row.ReplicaVersion, row.SyncedAt = string(p.Status), p.Version, at
		if err := writeRow(ctx, tx, row); err != nil {
			return "", err
		}
		lf.setApplied(p.Status)
		if !p.StatusKnown {
			consumer.AfterCommit(ctx, func() {
				h.m.unknownStatus.Inc()
				log.Warn().Func(lf.fields).Msg("unknown-bond-status")
			})
		}
		return OutcomeClosed, nil
	case ActionSkipStale:
		h.skippedStale(ctx, ev.Type)
		return consumer.SkippedStale, nil
	case ActionSkipAlreadyClosed:
		return OutcomeSkippedAlreadyClosed, nil
	case ActionReferredMismatch:
		return "", CodeInvalid.Errorf("bond-closed for BondId %s (Version %d): ReferredUserId %s differs from the replica's %s",
			p.BondID, p.Version, p.ReferredUserID, row.ReferredUserID)
	case ActionOrphan:
		return "", CodeOrphanClosed.Errorf("bond-closed for BondId %s (ReferredUserId %s, Version %d): the replica has no row for the bond; replay the topic from offset 0",
			p.BondID, p.ReferredUserID, p.Version)
	default:
		return "", fmt.Errorf("bond-closed for BondId %s: unexpected action %s", p.BondID, a)
	}
}

func (h *handler) skippedStale(ctx context.Context, t EventType) {
	consumer.AfterCommit(ctx, func() { h.m.stale.WithLabelValues(t.String()).Inc() })
}

// lockRow reads the bond's row for update, or nil when there is none. In a
// batch, prepare has read and locked it already.
func lockRow(ctx context.Context, tx *ent.Tx, id uuid.UUID) (*ent.ReferralBondReplica, error) {
	if row, ok := preparedRow(ctx, id); ok {
		return row, nil
	}
	row, err := tx.ReferralBondReplica.Query().Where(referralbondreplica.ID(id)).ForUpdate().Only(ctx)
	if ent.IsNotFound(err) {
		return nil, nil
	}
	return row, err
}

// newRow is the Active row a bond-created inserts.
func newRow(p BondCreated, at time.Time) *ent.ReferralBondReplica {
	return &ent.ReferralBondReplica{
		ID: p.BondID, ReferredUserID: p.ReferredUserID, ReferrerUserID: p.ReferrerUserID,
		ReferrerCompanyID: p.ReferrerCompanyID, Status: string(StatusActive),
		BoundAt: p.BoundAt.Round(time.Microsecond), ReplicaVersion: p.Version, SyncedAt: at,
	}
}

// createRow is the INSERT of row r.
func createRow(tx *ent.Tx, r *ent.ReferralBondReplica) *ent.ReferralBondReplicaCreate {
	return tx.ReferralBondReplica.Create().
		SetID(r.ID).
		SetReferredUserID(r.ReferredUserID).
		SetReferrerUserID(r.ReferrerUserID).
		SetNillableReferrerCompanyID(r.ReferrerCompanyID).
		SetStatus(r.Status).
		SetBoundAt(r.BoundAt).
		SetReplicaVersion(r.ReplicaVersion).
		SetSyncedAt(r.SyncedAt)
}

// writeRow writes the locked row's mutable fields (status, replica_version,
// synced_at) as the handler set them: in a batch at its end, else now with
// one UPDATE statement (ent's UpdateOne would read the row back).
func writeRow(ctx context.Context, tx *ent.Tx, row *ent.ReferralBondReplica) error {
	if rs := batchRows(ctx); rs != nil {
		rs.queueUpdate(row)
		return nil
	}
	n, err := tx.ReferralBondReplica.Update().Where(referralbondreplica.ID(row.ID)).
		SetStatus(row.Status).
		SetReplicaVersion(row.ReplicaVersion).
		SetSyncedAt(row.SyncedAt).
		Save(ctx)
	if err != nil {
		return fmt.Errorf("update bond %s: %w", row.ID, err)
	}
	if n != 1 { // the row is locked by this transaction: cannot happen
		return fmt.Errorf("update bond %s: %d rows updated, want 1", row.ID, n)
	}
	return nil
}

func rowOf(r *ent.ReferralBondReplica) *Row {
	if r == nil {
		return nil
	}
	return &Row{Status: Status(r.Status), ReplicaVersion: r.ReplicaVersion, ReferredUserID: r.ReferredUserID}
}

// insertActive inserts the bond as Active and reports whether a row was
// inserted. ON CONFLICT DO NOTHING without a target covers both unique
// indexes (the primary key and the partial
// ux_referral_bond_replicas_referred_active), so a conflict leaves the
// transaction usable: a failed statement would abort it.
func insertActive(ctx context.Context, tx *ent.Tx, p BondCreated, at time.Time) (bool, error) {
	err := createRow(tx, newRow(p, at)).
		OnConflict(sql.DoNothing()).
		Exec(ctx)
	if errors.Is(err, stdsql.ErrNoRows) || ent.IsNotFound(err) { // ent#1821: nothing inserted
		return false, nil
	}
	return err == nil, err
}

// activeConflict is the REWARDS_BOND_REPLICA_ACTIVE_CONFLICT error of a
// bond-created refused by the single-active rule, naming the bond that holds
// the referred user.
func activeConflict(ctx context.Context, tx *ent.Tx, p BondCreated) error {
	holder, err := ActiveBond(ctx, tx.Client(), p.ReferredUserID)
	if err != nil {
		return err
	}
	if holder == nil { // closed since the insert looked: not a conflict any more
		return fmt.Errorf("bond-created for BondId %s: the insert conflicted, but no Active bond holds ReferredUserId %s now", p.BondID, p.ReferredUserID)
	}
	return activeConflictOf(p, holder)
}

func activeConflictOf(p BondCreated, holder *ent.ReferralBondReplica) error {
	return CodeActiveConflict.Errorf("bond-created for BondId %s (Version %d): ReferredUserId %s already has the Active bond %s (replica_version %d) (BND-3)",
		p.BondID, p.Version, p.ReferredUserID, holder.ID, holder.ReplicaVersion)
}

// immutableDiffs lists the source-immutable fields a newer bond-created
// carries with another value than the row. The row keeps its values.
func immutableDiffs(row *ent.ReferralBondReplica, p BondCreated) []string {
	var d []string
	if row.ReferredUserID != p.ReferredUserID {
		d = append(d, fmt.Sprintf("ReferredUserId: row %s, event %s", row.ReferredUserID, p.ReferredUserID))
	}
	if row.ReferrerUserID != p.ReferrerUserID {
		d = append(d, fmt.Sprintf("ReferrerUserId: row %s, event %s", row.ReferrerUserID, p.ReferrerUserID))
	}
	if !equalIDs(row.ReferrerCompanyID, p.ReferrerCompanyID) {
		d = append(d, fmt.Sprintf("ReferrerCompanyId: row %s, event %s", fmtID(row.ReferrerCompanyID), fmtID(p.ReferrerCompanyID)))
	}
	if !row.BoundAt.Equal(p.BoundAt.Round(time.Microsecond)) { // timestamptz keeps microseconds
		d = append(d, fmt.Sprintf("BoundAt: row %s, event %s", row.BoundAt.Format(time.RFC3339Nano), p.BoundAt.Format(time.RFC3339Nano)))
	}
	return d
}

func equalIDs(a, b *uuid.UUID) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func fmtID(id *uuid.UUID) string {
	if id == nil {
		return "null"
	}
	return id.String()
}

// bondLog is the message's log fields (spec, Observability): BondId,
// ReferredUserId, payload Version, row ReplicaVersion, Status. It is filled
// as the handler learns them and written on the runtime's outcome line.
// RevokeReason is never read, so never logged.
type bondLog struct {
	bondID         uuid.UUID
	referredUserID uuid.UUID
	version        int64
	replicaVersion *int64 // the row's, before the event; nil without a row
	status         string // the row's status after the event
	eventStatus    string // bond-closed: the payload's Status
	replacedBy     *uuid.UUID
}

func (l *bondLog) setRow(r *ent.ReferralBondReplica) {
	if r == nil {
		l.replicaVersion, l.status = nil, ""
		return
	}
	v := r.ReplicaVersion
	l.replicaVersion, l.status = &v, r.Status
}

// setApplied records the status the event left the row in. ReplicaVersion
// stays the row's before the event: the version guard's other operand.
func (l *bondLog) setApplied(s Status) { l.status = string(s) }

func (l *bondLog) fields(e *zerolog.Event) {
	if l.bondID != uuid.Nil { // a payload without it: dead-lettered, left out
		e.Str("BondId", l.bondID.String())
	}
	if l.referredUserID != uuid.Nil {
		e.Str("ReferredUserId", l.referredUserID.String())
	}
	if l.version != 0 {
		e.Int64("Version", l.version)
	}
	if l.replicaVersion != nil {
		e.Int64("ReplicaVersion", *l.replicaVersion)
	}
	if l.status != "" {
		e.Str("Status", l.status)
	}
	if l.eventStatus != "" {
		e.Str("EventStatus", l.eventStatus)
	}
	if l.replacedBy != nil {
		e.Str("ReplacedByBondId", l.replacedBy.String())
	}
}
