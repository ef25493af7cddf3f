package crm

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
)

// MaxTitleRunes is the longest SelectionTitle stored: longer titles are cut
// to this many characters (runes) and a warning is logged; the event is
// kept.
const MaxTitleRunes = 256

// Action is the payload's discriminator (enum SelectionShareAction).
type Action string

// The values of SelectionShareAction, in the spelling of the spec.
const (
	// ActionShared: the agent sent the selection to the client.
	ActionShared Action = "Shared"
	// ActionOpened: the client opened the selection. Reserved in the
	// producer's contract (not emitted yet), mapped already.
	ActionOpened Action = "Opened"
)

// ParseAction matches s case-insensitively against the known actions and
// returns the spec's spelling.
func ParseAction(s string) (Action, bool) {
	for _, a := range []Action{ActionShared, ActionOpened} {
		if strings.EqualFold(s, string(a)) {
			return a, true
		}
	}
	return "", false
}

// LeadEventType is lead_events.type.
type LeadEventType string

// The feed entry types this consumer appends.
const (
	SelectionAttached LeadEventType = "SelectionAttached"
	SelectionViewed   LeadEventType = "SelectionViewed"
)

// EventType maps the action to the feed entry type: Shared →
// SelectionAttached, Opened → SelectionViewed.
func (a Action) EventType() LeadEventType {
	if a == ActionOpened {
		return SelectionViewed
	}
	return SelectionAttached
}

// wirePayload is the envelope's Payload as it travels. Member names are
// matched case-insensitively (encoding/json); every member is a pointer so
// that a missing one can be told from a zero one. Guids and the timestamp
// are read as text and parsed here, so that an error names its field.
type wirePayload struct {
	SelectionID          *string `json:"SelectionId"`
	SelectionTitle       *string `json:"SelectionTitle"`
	PropertyObjectsCount *int64  `json:"PropertyObjectsCount"`
	Action               *string `json:"Action"`
	AgentUserID          *string `json:"AgentUserId"`
	InvestorUserID       *string `json:"InvestorUserId"`
	OccurredAt           *string `json:"OccurredAt"`
}

// SelectionShared is a validated event.
type SelectionShared struct {
	SelectionID          uuid.UUID
	SelectionTitle       string // at most MaxTitleRunes runes
	PropertyObjectsCount int32
	Action               Action
	AgentUserID          uuid.UUID
	InvestorUserID       uuid.UUID
	OccurredAt           time.Time
	// TitleRunes is the length in runes of the title as it came; more than
	// MaxTitleRunes means SelectionTitle was cut.
	TitleRunes int
}

// TitleTruncated reports whether the title was cut to MaxTitleRunes.
func (e SelectionShared) TitleTruncated() bool { return e.TitleRunes > MaxTitleRunes }

// validationError lists what is wrong with a payload. unknownAction is set
// when the Action was present but is not a SelectionShareAction, and it is
// the only problem: that case has its own code
// (CRM_SELECTION_UNKNOWN_ACTION).
type validationError struct {
	problems      []string
	unknownAction bool
}

func (e *validationError) Error() string { return strings.Join(e.problems, "; ") }

// validate checks the payload against the spec's table and returns the
// event. A title over MaxTitleRunes is not an error: it is cut on a rune
// boundary (TitleRunes keeps the original length for the warning).
func (p wirePayload) validate() (SelectionShared, *validationError) {
	var e SelectionShared
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	guid := func(name string, v *string, dst *uuid.UUID) {
		if v == nil {
			bad("%s is missing", name)
			return
		}
		id, err := uuid.Parse(*v)
		switch {
		case err != nil:
			bad("%s %q is not a GUID", name, consumer.Cut(*v))
		case id == uuid.Nil:
			bad("%s is the empty GUID", name)
		default:
			*dst = id
		}
	}
	guid("SelectionId", p.SelectionID, &e.SelectionID)

	switch {
	case p.SelectionTitle == nil:
		bad("SelectionTitle is missing")
	case *p.SelectionTitle == "":
		bad("SelectionTitle is empty")
	case strings.ContainsRune(*p.SelectionTitle, 0):
		bad("SelectionTitle contains a NUL character")
	default:
		e.SelectionTitle, e.TitleRunes = truncateRunes(*p.SelectionTitle, MaxTitleRunes)
	}

	switch {
	case p.PropertyObjectsCount == nil:
		bad("PropertyObjectsCount is missing")
	case *p.PropertyObjectsCount < 0:
		bad("PropertyObjectsCount is %d, must be ≥ 0", *p.PropertyObjectsCount)
	case *p.PropertyObjectsCount > math.MaxInt32:
		bad("PropertyObjectsCount is %d, more than an int holds", *p.PropertyObjectsCount)
	default:
		e.PropertyObjectsCount = int32(*p.PropertyObjectsCount)
	}

	guid("AgentUserId", p.AgentUserID, &e.AgentUserID)
	guid("InvestorUserId", p.InvestorUserID, &e.InvestorUserID)

	if p.OccurredAt == nil {
		bad("OccurredAt is missing")
	} else {
		t, err := time.Parse(time.RFC3339Nano, *p.OccurredAt)
		switch {
		case err != nil:
			bad("OccurredAt %q is not an RFC 3339 date-time with offset", consumer.Cut(*p.OccurredAt))
		case t.IsZero():
			bad("OccurredAt is the zero time")
		default:
			e.OccurredAt = t
		}
	}

	unknown := false
	switch {
	case p.Action == nil || *p.Action == "":
		bad("Action is missing")
	default:
		a, ok := ParseAction(*p.Action)
		if !ok {
			unknown = true
			bad("Action %q is not a SelectionShareAction (Shared, Opened)", consumer.Cut(*p.Action))
		}
		e.Action = a
	}

	if len(problems) > 0 {
		return e, &validationError{problems: problems, unknownAction: unknown && len(problems) == 1}
	}
	return e, nil
}

// truncateRunes returns s cut to at most n runes, on a rune boundary (never
// inside a multi-byte character), and the number of runes s had.
func truncateRunes(s string, n int) (string, int) {
	count := 0
	cut := len(s)
	for i := range s {
		if count == n {
			cut = i
		}
		count++
	}
	if count <= n {
		return s, count
	}
	return s[:cut], count
}

// LeadSelectionPayload is lead_events.payload of both SelectionAttached and
// SelectionViewed: exactly these three members (docs/contract.md §6).
type LeadSelectionPayload struct {
	SelectionID          uuid.UUID `json:"SelectionId"`
	SelectionTitle       string    `json:"SelectionTitle"`
	PropertyObjectsCount int32     `json:"PropertyObjectsCount"`
}

// FeedPayload is the feed entry's payload for the event.
func (e SelectionShared) FeedPayload() LeadSelectionPayload {
	return LeadSelectionPayload{
		SelectionID:          e.SelectionID,
		SelectionTitle:       e.SelectionTitle,
		PropertyObjectsCount: e.PropertyObjectsCount,
	}
}
