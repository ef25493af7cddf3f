package rewards

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
)

// Status is a bond's status as the replica stores it (varchar(32), text).
// Known values are kept in the spec's spelling; an unknown value is kept as
// it came. Only StatusActive lets an accrual be made.
type Status string

// The statuses of ReferralBondStatus (the enum's home is the referral
// service).
const (
	StatusActive   Status = "Active"
	StatusReplaced Status = "Replaced"
	StatusRevoked  Status = "Revoked"
)

// maxStatusLen is the width of the status column, in characters.
const maxStatusLen = 32

// ParseStatus matches s case-insensitively against the known statuses and
// returns it in the spec's spelling. An unknown value comes back as it came,
// with known = false.
func ParseStatus(s string) (st Status, known bool) {
	for _, k := range []Status{StatusActive, StatusReplaced, StatusRevoked} {
		if strings.EqualFold(s, string(k)) {
			return k, true
		}
	}
	return Status(s), false
}

// Terminal reports a closed status of the contract (Replaced, Revoked): a
// row in it never changes again (BND-4).
func (s Status) Terminal() bool {
	st, _ := ParseStatus(string(s))
	return st == StatusReplaced || st == StatusRevoked
}

// Active reports whether s lets an accrual be made.
func (s Status) Active() bool {
	st, _ := ParseStatus(string(s))
	return st == StatusActive
}

// BondCreated is a validated pin.referral.bond-created payload: the fields
// this consumer reads (ReferralLinkId, Channel, AppliedRule are ignored).
type BondCreated struct {
	BondID            uuid.UUID
	ReferredUserID    uuid.UUID
	ReferrerUserID    uuid.UUID
	ReferrerCompanyID *uuid.UUID
	BoundAt           time.Time
	Version           int64
}

// BondClosed is a validated pin.referral.bond-closed payload. RevokeReason
// is neither decoded, stored nor logged.
type BondClosed struct {
	BondID         uuid.UUID
	ReferredUserID uuid.UUID
	// Status in the spec's spelling when known, else as it came.
	Status      Status
	StatusKnown bool
	// ReplacedByBondID is for the log only.
	ReplacedByBondID *uuid.UUID
	Version          int64
}

// Wire forms: every member optional, so that a missing member and an
// invalid one are told apart in the DLQ reason. Member names are matched
// case-insensitively by encoding/json (docs/contract.md §4).
type createdWire struct {
	BondID            *string    `json:"BondId"`
	ReferredUserID    *string    `json:"ReferredUserId"`
	ReferrerUserID    *string    `json:"ReferrerUserId"`
	ReferrerCompanyID *string    `json:"ReferrerCompanyId"`
	BoundAt           *time.Time `json:"BoundAt"`
	Version           *int64     `json:"Version"`
}

type closedWire struct {
	BondID           *string `json:"BondId"`
	ReferredUserID   *string `json:"ReferredUserId"`
	Status           *string `json:"Status"`
	ReplacedByBondID *string `json:"ReplacedByBondId"`
	Version          *int64  `json:"Version"`
}

// decodeCreated reads and validates a bond-created payload. Every failure is
// a REWARDS_BOND_EVENT_INVALID error.
func decodeCreated(m *consumer.Message) (BondCreated, error) {
	w, err := consumer.DecodePayload[createdWire](m)
	if err != nil {
		return BondCreated{}, err
	}
	p, err := w.validate()
	if err != nil {
		return p, err
	}
	return p, m.CheckTime("BoundAt", p.BoundAt)
}

// decodeClosed reads and validates a bond-closed payload.
func decodeClosed(m *consumer.Message) (BondClosed, error) {
	w, err := consumer.DecodePayload[closedWire](m)
	if err != nil {
		return BondClosed{}, err
	}
	return w.validate()
}

// validate applies step 2 of the spec to bond-created: BondId,
// ReferredUserId, ReferrerUserId non-empty, BoundAt set, Version ≥ 1.
func (w createdWire) validate() (BondCreated, error) {
	var p BondCreated
	var errs fieldErrors
	p.BondID = errs.requiredID("BondId", w.BondID)
	p.ReferredUserID = errs.requiredID("ReferredUserId", w.ReferredUserID)
	p.ReferrerUserID = errs.requiredID("ReferrerUserId", w.ReferrerUserID)
	p.ReferrerCompanyID = errs.optionalID("ReferrerCompanyId", w.ReferrerCompanyID)
	if w.BoundAt == nil || w.BoundAt.IsZero() {
		errs.add("BoundAt is missing")
	} else {
		p.BoundAt = *w.BoundAt
	}
	p.Version = errs.version(w.Version)
	return p, errs.err()
}

// validate applies step 2 of the spec to bond-closed: BondId and
// ReferredUserId non-empty, Status present (a closing status: Active is a
// contract violation), ReplacedByBondId when Status is Replaced, Version ≥ 1. An unknown Status is valid: it is
// stored as it came (fail-closed), as long as the column can hold it.
func (w closedWire) validate() (BondClosed, error) {
	var p BondClosed
	var errs fieldErrors
	p.BondID = errs.requiredID("BondId", w.BondID)
	p.ReferredUserID = errs.requiredID("ReferredUserId", w.ReferredUserID)
	switch {
	case w.Status == nil || strings.TrimSpace(*w.Status) == "":
		errs.add("Status is missing")
	case utf8.RuneCountInString(*w.Status) > maxStatusLen:
		errs.add(fmt.Sprintf("Status is longer than %d characters", maxStatusLen))
	default:
		p.Status, p.StatusKnown = ParseStatus(*w.Status)
		if p.Status == StatusActive {
			errs.add("Status Active is not a closing status")
		}
	}
	p.ReplacedByBondID = errs.optionalID("ReplacedByBondId", w.ReplacedByBondID)
	// The original spec: ReplacedByBondId is required when Status is
	// Replaced (the bond that replaced it goes to the log).
	if p.Status == StatusReplaced {
		switch {
		case w.ReplacedByBondID == nil:
			errs.add("ReplacedByBondId is missing (required when Status is Replaced)")
		case p.ReplacedByBondID != nil && *p.ReplacedByBondID == uuid.Nil:
			errs.add("ReplacedByBondId is empty (all zeros; required when Status is Replaced)")
		}
	}
	p.Version = errs.version(w.Version)
	return p, errs.err()
}

// fieldErrors collects every violation of one payload, so that the DLQ
// reason names them all.
type fieldErrors []string

func (e *fieldErrors) add(s string) { *e = append(*e, s) }

func (e *fieldErrors) requiredID(name string, v *string) uuid.UUID {
	if v == nil || *v == "" {
		e.add(name + " is missing")
		return uuid.Nil
	}
	id, err := uuid.Parse(*v)
	switch {
	case err != nil:
		e.add(fmt.Sprintf("%s %q is not a UUID", name, consumer.Cut(*v)))
	case id == uuid.Nil:
		e.add(name + " is empty (all zeros)")
	}
	return id
}

func (e *fieldErrors) optionalID(name string, v *string) *uuid.UUID {
	if v == nil {
		return nil
	}
	id, err := uuid.Parse(*v)
	if err != nil {
		e.add(fmt.Sprintf("%s %q is not a UUID", name, consumer.Cut(*v)))
		return nil
	}
	return &id
}

func (e *fieldErrors) version(v *int64) int64 {
	switch {
	case v == nil:
		e.add("Version is missing")
		return 0
	case *v < 1:
		e.add(fmt.Sprintf("Version %d is < 1", *v))
	}
	return *v
}

func (e fieldErrors) err() error {
	if len(e) == 0 {
		return nil
	}
	return CodeInvalid.Errorf("Payload: %s", strings.Join(e, "; "))
}

// eventTime is the envelope's CreatedAt: synced_at of an applied event.
func eventTime(m *consumer.Message) (time.Time, error) {
	if m.CreatedAt.IsZero() {
		return time.Time{}, CodeInvalid.Errorf("CreatedAt is missing: the event time is the replica's synced_at")
	}
	return m.CreatedAt, nil
}
