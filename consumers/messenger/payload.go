package messenger

import (
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
)

// payload is the Payload of pin.crm.lead-participants-changed (spec
// "Input"). Member names are matched case-insensitively by encoding/json;
// TenantId and ChangedByUserId are not read.
type payload struct {
	LeadID             uuid.UUID             `json:"LeadId"`
	ActiveParticipants []participantSnapshot `json:"ActiveParticipants"`
	Participants       *[]participantChange  `json:"Participants"` // required: nil when missing or null
	Version            int64                 `json:"Version"`
	ChangedAt          time.Time             `json:"ChangedAt"`
}

// participantSnapshot is one member of the lead's target set.
type participantSnapshot struct {
	UserID uuid.UUID `json:"UserId"`
	Role   string    `json:"Role"`
}

// participantChange is one entry of the delta. It never decides membership.
type participantChange struct {
	UserID       uuid.UUID `json:"UserId"`
	ChangeType   string    `json:"ChangeType"`
	Role         string    `json:"Role"`
	PreviousRole *string   `json:"PreviousRole"`
}

// Roles of a lead chat's members, in the spec's spelling (identity mapping
// of CRM's ParticipantRole).
const (
	RoleExecutor          = "Executor"
	RoleResponsible       = "Responsible"
	RoleCoAgent           = "CoAgent"
	RoleAssistant         = "Assistant"
	RoleLawyer            = "Lawyer"
	RoleInvestorPrimary   = "InvestorPrimary"
	RoleInvestorSecondary = "InvestorSecondary"
)

var knownRoles = []string{
	RoleExecutor, RoleResponsible, RoleCoAgent, RoleAssistant, RoleLawyer,
	RoleInvestorPrimary, RoleInvestorSecondary,
}

// ChangeType values of the delta.
const (
	ChangeAdded              = "Added"
	ChangeRemoved            = "Removed"
	ChangeRoleChanged        = "RoleChanged"
	ChangeExecutorChanged    = "ExecutorChanged"
	ChangeResponsibleChanged = "ResponsibleChanged"
)

var knownChangeTypes = []string{
	ChangeAdded, ChangeRemoved, ChangeRoleChanged, ChangeExecutorChanged, ChangeResponsibleChanged,
}

// maxRoleLen is the width of the role columns (varchar(32)), in
// characters as PostgreSQL counts them (code points): a role is measured
// with utf8.RuneCountInString, never in bytes.
const maxRoleLen = 32

// MaxParticipants caps ActiveParticipants and Participants: a lead's chat
// has a handful of members; a list of thousands is a producer's bug, not a
// chat, and is refused as MSG_LEAD_PARTICIPANTS_INVALID.
const MaxParticipants = 1000

// canonical returns the spelling in known that matches v case-insensitively,
// or v itself and false.
func canonical(v string, known []string) (string, bool) {
	for _, k := range known {
		if strings.EqualFold(v, k) {
			return k, true
		}
	}
	return v, false
}

// canonicalRole maps a CRM role to the messenger role. A known role is
// stored in the spec's spelling; an unknown one is kept as it came (and
// counts as the Guest bucket for access, which is decided by membership
// elsewhere), and known is false so the caller can warn.
func canonicalRole(role string) (r string, known bool) { return canonical(role, knownRoles) }

// sameRole compares roles the way enum values are compared: case-insensitively.
func sameRole(a, b string) bool { return strings.EqualFold(a, b) }

// snapshot is a validated payload: the target set, folded and with roles in
// their canonical spelling, and the delta with canonical change types.
type snapshot struct {
	LeadID       uuid.UUID
	Version      int64
	ChangedAt    time.Time
	Target       []member // sorted by UserID
	UnknownRoles []member // members of Target whose role is not one of the spec's
	Delta        []participantChange
	// UnknownChanges are the delta entries whose ChangeType is not one of
	// the spec's: a no-op of the delta, warned about.
	UnknownChanges []participantChange
	// Folded counts exact repeats of a member in ActiveParticipants.
	Folded int
}

// validate checks a decoded payload (spec "Algorithm" step 2) and builds the
// snapshot. Every failure is a MSG_LEAD_PARTICIPANTS_INVALID error.
//
// Decisions beyond the spec's list, all on the side of never writing a
// wrong fact: a member without a Role, or with one longer than the column
// (32 characters), is invalid; ChangedAt is required because it becomes the feed's
// occurred_at. Participants (the delta) is required, as the original spec
// marks it, and so is every entry's UserId; the list may be empty.
func validate(p payload) (snapshot, error) {
	s := snapshot{LeadID: p.LeadID, Version: p.Version, ChangedAt: p.ChangedAt}
	if p.LeadID == uuid.Nil {
		return s, CodeInvalid.Errorf("LeadId is missing")
	}
	if p.Version < 1 {
		return s, CodeInvalid.Errorf("Version %d is not ≥ 1", p.Version)
	}
	if p.ChangedAt.IsZero() {
		return s, CodeInvalid.Errorf("ChangedAt is missing")
	}
	if n := len(p.ActiveParticipants); n > MaxParticipants {
		return s, CodeInvalid.Errorf("ActiveParticipants has %d members, more than %d", n, MaxParticipants)
	}
	if p.Participants == nil {
		return s, CodeInvalid.Errorf("Participants is missing (the delta is required; it may be empty)")
	}
	if n := len(*p.Participants); n > MaxParticipants {
		return s, CodeInvalid.Errorf("Participants has %d changes, more than %d", n, MaxParticipants)
	}
	if len(p.ActiveParticipants) == 0 {
		return s, CodeInvalid.Errorf("ActiveParticipants is empty (MSG-3: a lead chat keeps at least one member)")
	}
	byUser := make(map[uuid.UUID]int, len(p.ActiveParticipants))
	for i, ap := range p.ActiveParticipants {
		if ap.UserID == uuid.Nil {
			return s, CodeInvalid.Errorf("ActiveParticipants[%d].UserId is missing", i)
		}
		if strings.TrimSpace(ap.Role) == "" {
			return s, CodeInvalid.Errorf("ActiveParticipants[%d].Role is missing", i)
		}
		if utf8.RuneCountInString(ap.Role) > maxRoleLen {
			return s, CodeInvalid.Errorf("ActiveParticipants[%d].Role is longer than %d characters", i, maxRoleLen)
		}
		role, known := canonicalRole(ap.Role)
		if j, dup := byUser[ap.UserID]; dup {
			if !sameRole(s.Target[j].Role, role) {
				return s, CodeInvalid.Errorf("ActiveParticipants: user %s appears twice with different roles (%s, %s)",
					ap.UserID, s.Target[j].Role, role)
			}
			s.Folded++
			continue
		}
		byUser[ap.UserID] = len(s.Target)
		s.Target = append(s.Target, member{UserID: ap.UserID, Role: role})
		if !known {
			s.UnknownRoles = append(s.UnknownRoles, member{UserID: ap.UserID, Role: role})
		}
	}
	sortMembers(s.Target)
	for i, c := range *p.Participants {
		if c.UserID == uuid.Nil {
			return s, CodeInvalid.Errorf("Participants[%d].UserId is missing", i)
		}
		ct, known := canonical(c.ChangeType, knownChangeTypes)
		c.ChangeType = ct
		c.Role, _ = canonicalRole(c.Role)
		if !known {
			s.UnknownChanges = append(s.UnknownChanges, c)
			continue
		}
		s.Delta = append(s.Delta, c)
	}
	return s, nil
}

// decode reads and validates the message's payload.
func decode(m *consumer.Message) (snapshot, error) {
	p, err := consumer.DecodePayload[payload](m)
	if err != nil {
		// DecodePayload reports with the service's invalid code, which is
		// ours; re-wrap so that the code is ours also when the handler runs
		// outside a runtime (tests).
		var e *consumer.Error
		if errors.As(err, &e) {
			err = e.Err
		}
		return snapshot{}, CodeInvalid.Wrap(err)
	}
	s, err := validate(p)
	if err != nil {
		return s, err
	}
	return s, m.CheckTime("ChangedAt", s.ChangedAt)
}
