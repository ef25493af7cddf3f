package rewards

import (
	"fmt"

	"github.com/google/uuid"
)

// EventType is one of the two event types of pin.referral.bonds.v1.
type EventType int

const (
	BondCreatedEvent EventType = iota + 1
	BondClosedEvent
)

func (t EventType) String() string {
	switch t {
	case BondCreatedEvent:
		return "bond-created"
	case BondClosedEvent:
		return "bond-closed"
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// Row is what the decision needs of an existing replica row.
type Row struct {
	Status         Status
	ReplicaVersion int64
	ReferredUserID uuid.UUID
}

// Event is what the decision needs of an incoming event.
type Event struct {
	Type           EventType
	Version        int64
	ReferredUserID uuid.UUID
}

// Action is what the handler does with an event.
type Action int

const (
	// ActionInsert: bond-created, no row: insert an Active row (the
	// single-active rule may still refuse it: REWARDS_BOND_REPLICA_ACTIVE_CONFLICT).
	ActionInsert Action = iota + 1
	// ActionUpdate: bond-created with a higher Version on an Active row:
	// replica_version and synced_at move forward, source-immutable fields
	// stay (a difference is logged).
	ActionUpdate
	// ActionClose: bond-closed with a higher Version on a row that is not
	// terminal: status, replica_version and synced_at are set.
	ActionClose
	// ActionSkipStale: Version ≤ replica_version (BND-1): mark only.
	ActionSkipStale
	// ActionSkipAlreadyClosed: bond-closed on a Replaced/Revoked row
	// (BND-4): mark only.
	ActionSkipAlreadyClosed
	// ActionInvalidTerminal: bond-created with a higher Version on a row
	// that is not Active: a closed bond never returns to Active (BND-4).
	// REWARDS_BOND_EVENT_INVALID.
	ActionInvalidTerminal
	// ActionOrphan: bond-closed without a row: REWARDS_BOND_EVENT_ORPHAN_CLOSED
	// after the immediate re-reads.
	ActionOrphan
	// ActionReferredMismatch: bond-closed whose ReferredUserId differs from
	// the row's: REWARDS_BOND_EVENT_INVALID (fail closed).
	ActionReferredMismatch
)

var actionNames = map[Action]string{
	ActionInsert:            "insert",
	ActionUpdate:            "update",
	ActionClose:             "close",
	ActionSkipStale:         "skip-stale",
	ActionSkipAlreadyClosed: "skip-already-closed",
	ActionInvalidTerminal:   "invalid-terminal",
	ActionOrphan:            "orphan",
	ActionReferredMismatch:  "referred-mismatch",
}

func (a Action) String() string {
	if s, ok := actionNames[a]; ok {
		return s
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Decide is step 3–4 of the spec: the replica row (nil when there is none)
// and an event give the action. It needs no database.
//
// A bond-closed on a Replaced or Revoked row is skipped as already closed
// whatever its Version (BND-4): the contract allows one closed per bond,
// so such a closed is that one again, re-published (a redelivery of the
// same message is a duplicate by its mark before this), and the original
// spec's acceptance criterion says skipped-already-closed for it. Taking
// the version guard first made that criterion unreachable: a closed
// published again carries the Version that closed the row, which the guard
// calls stale. Otherwise the version guard comes first for an existing
// row, as in the spec: an event whose Version is not above replica_version
// is skipped as stale whatever the row's status. A row whose status is
// unknown (stored as it came from a bond-closed) is not Active: a
// bond-created never re-activates it (fail closed), while a newer
// bond-closed may still set a status on it.
func Decide(row *Row, ev Event) Action {
	if row == nil {
		if ev.Type == BondCreatedEvent {
			return ActionInsert
		}
		return ActionOrphan
	}
	if ev.Type == BondClosedEvent && row.Status.Terminal() {
		return ActionSkipAlreadyClosed
	}
	if ev.Version <= row.ReplicaVersion {
		return ActionSkipStale
	}
	if ev.Type == BondCreatedEvent {
		if row.Status.Active() {
			return ActionUpdate
		}
		return ActionInvalidTerminal
	}
	if ev.ReferredUserID != row.ReferredUserID {
		return ActionReferredMismatch
	}
	return ActionClose
}
