package rewards

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
)

// handler holds the business logic of both routes. The runtime owns the
// transaction, the idempotency mark, the offset, retries and the DLQ.
type handler struct {
	m   *metrics
	lag *syncedLag // the synced_at of each committed write
}

// bondCreated applies a pin.referral.bond-created: it decides on the
// bond's row in the view read read and queues the write.
func (h *handler) bondCreated(ctx context.Context, v *view, m *consumer.Message) (consumer.Outcome, error) {
	p, err := decodeCreated(m)
	if err != nil {
		return "", err
	}
	at, err := eventTime(m)
	if err != nil {
		return "", err
	}
	lf := &bondLog{bondID: p.BondID, referredUserID: p.ReferredUserID, version: p.Version}
	m.LogFields(lf.fields)
	log := zerolog.Ctx(ctx) // the runtime logged "consumed"; the outcome line gets lf

	row, err := v.row(p.BondID)
	if err != nil {
		return "", err
	}
	lf.setRow(row)
	ev := Event{Type: BondCreatedEvent, Version: p.Version, ReferredUserID: p.ReferredUserID}
	switch a := Decide(rowOf(row), ev); a {
	case ActionInsert:
		// The single-active rule (BND-3), as the partial unique index
		// would hold it, against the view: the referred user's Active
		// bonds as Read locked them, with the transaction's writes.
		if holder := v.activeOf(p.ReferredUserID); holder != nil {
			return "", activeConflict(p, holder)
		}
		v.queueInsert(newRow(p, at))
		lf.setApplied(StatusActive)
		m.AfterCommit(func() { h.lag.applied(at) })
		return OutcomeCreated, nil
	case ActionUpdate:
		row.ReplicaVersion, row.SyncedAt = p.Version, at
		v.queueUpdate(row)
		lf.setApplied(Status(row.Status))
		m.AfterCommit(func() { h.lag.applied(at) })
		if diffs := immutableDiffs(row, p); len(diffs) > 0 {
			m.AfterCommit(func() {
				log.Warn().Func(lf.fields).Strs("differs", diffs).Msg("immutable-field-differs")
			})
		}
		return OutcomeUpdated, nil
	case ActionSkipStale:
		h.skippedStale(m, ev.Type)
		return consumer.SkippedStale, nil
	case ActionInvalidTerminal:
		return "", CodeInvalid.Errorf("bond-created for BondId %s (Version %d) on a row in status %s (replica_version %d): a closed bond never returns to Active (BND-4)",
			p.BondID, p.Version, row.Status, row.ReplicaVersion)
	default:
		return "", fmt.Errorf("bond-created for BondId %s: unexpected action %s", p.BondID, a)
	}
}

// bondClosed applies a pin.referral.bond-closed: it decides on the bond's
// row in the view read read and queues the write.
func (h *handler) bondClosed(ctx context.Context, v *view, m *consumer.Message) (consumer.Outcome, error) {
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
	m.LogFields(lf.fields)
	log := zerolog.Ctx(ctx) // the runtime logged "consumed"; the outcome line gets lf

	row, err := v.row(p.BondID)
	if err != nil {
		return "", err
	}
	lf.setRow(row)
	ev := Event{Type: BondClosedEvent, Version: p.Version, ReferredUserID: p.ReferredUserID}
	switch a := Decide(rowOf(row), ev); a {
	case ActionClose:
		row.Status, row.ReplicaVersion, row.SyncedAt = string(p.Status), p.Version, at
		v.queueUpdate(row)
		lf.setApplied(p.Status)
		m.AfterCommit(func() { h.lag.applied(at) })
		if !p.StatusKnown {
			m.AfterCommit(func() {
				h.m.unknownStatus.Inc()
				log.Warn().Func(lf.fields).Msg("unknown-bond-status")
			})
		}
		return OutcomeClosed, nil
	case ActionSkipStale:
		h.skippedStale(m, ev.Type)
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

func (h *handler) skippedStale(m *consumer.Message, t EventType) {
	m.AfterCommit(func() { h.m.stale.WithLabelValues(t.String()).Inc() })
}

// newRow is the Active row a bond-created inserts.
func newRow(p BondCreated, at time.Time) *ent.ReferralBondReplica {
	return &ent.ReferralBondReplica{
		ID: p.BondID, ReferredUserID: p.ReferredUserID, ReferrerUserID: p.ReferrerUserID,
		ReferrerCompanyID: p.ReferrerCompanyID, Status: string(StatusActive),
		BoundAt: p.BoundAt.Round(time.Microsecond), ReplicaVersion: p.Version, SyncedAt: at,
	}
}

func rowOf(r *ent.ReferralBondReplica) *Row {
	if r == nil {
		return nil
	}
	return &Row{Status: Status(r.Status), ReplicaVersion: r.ReplicaVersion, ReferredUserID: r.ReferredUserID}
}

// activeConflict is the REWARDS_BOND_REPLICA_ACTIVE_CONFLICT error of a
// bond-created refused by the single-active rule, naming the bond that
// holds the referred user.
func activeConflict(p BondCreated, holder *ent.ReferralBondReplica) error {
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
