package crm

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/servicetest"
)

// The fuzz targets of this package; their seed corpora are under
// testdata/fuzz/<name> (plain `go test` runs them), `make fuzz` fuzzes each.

// FuzzDecodeCRM: decode (the handler's DecodePayload, validate and
// CheckTime) does not panic on any Payload; a refusal carries exactly one
// of CRM_SELECTION_EVENT_INVALID and CRM_SELECTION_UNKNOWN_ACTION (or, for
// a value whose envelope cannot be read, EVENT_ENVELOPE_INVALID), and
// CRM_SELECTION_UNKNOWN_ACTION only when the Action is the payload's one
// fault (the same payload with Action Shared is accepted); an accepted
// event is storable — SelectionId, AgentUserId, InvestorUserId non-nil, a
// title of 1 to 256 runes of valid UTF-8 without NUL that begins the title
// as it came, a count ≥ 0, a known Action, OccurredAt set and not beyond
// MAX_CLOCK_SKEW, a feed payload that round-trips through JSON — and,
// written back as a payload, decodes to the same event.
func FuzzDecodeCRM(f *testing.F) {
	svc := New(prometheus.NewRegistry())
	f.Fuzz(func(t *testing.T, payload []byte) {
		m, err := servicetest.PayloadMessage(svc, EventType, "Selection", payload)
		if err != nil {
			servicetest.RequireOneCode(t, err, consumer.EnvelopeInvalid)
			return
		}
		p, ev, err := decode(m)
		if err != nil {
			c := servicetest.RequireOneCode(t, err, CodeEventInvalid, CodeUnknownAction)
			if c.Name == CodeUnknownAction.Name {
				shared := p
				shared.Action = ptr("Shared")
				if _, _, err := decode(messageOf(t, svc, shared)); err != nil {
					t.Fatalf("%v, but with Action Shared the payload is still refused: %v\npayload %q", c.Name, err, payload)
				}
			}
			return
		}
		checkEvent(t, p, ev)
		again := wirePayload{
			SelectionID: ptr(ev.SelectionID.String()), SelectionTitle: ptr(ev.SelectionTitle),
			PropertyObjectsCount: ptr(int64(ev.PropertyObjectsCount)), Action: ptr(string(ev.Action)),
			AgentUserID: ptr(ev.AgentUserID.String()), InvestorUserID: ptr(ev.InvestorUserID.String()),
			OccurredAt: ptr(ev.OccurredAt.Format(time.RFC3339Nano)),
		}
		_, ev2, err := decode(messageOf(t, svc, again))
		if err != nil {
			t.Fatalf("written back, the event is refused: %v\nfirst %q", err, payload)
		}
		if ev2.SelectionID != ev.SelectionID || ev2.SelectionTitle != ev.SelectionTitle || ev2.PropertyObjectsCount != ev.PropertyObjectsCount ||
			ev2.Action != ev.Action || ev2.AgentUserID != ev.AgentUserID || ev2.InvestorUserID != ev.InvestorUserID ||
			!ev2.OccurredAt.Equal(ev.OccurredAt) || ev2.TitleTruncated() {
			t.Fatalf("written back, the event decodes to another one:\nfirst %+v\nagain %+v", ev, ev2)
		}
	})
}

func checkEvent(t *testing.T, p wirePayload, ev SelectionShared) {
	t.Helper()
	if ev.SelectionID == uuid.Nil || ev.AgentUserID == uuid.Nil || ev.InvestorUserID == uuid.Nil {
		t.Fatalf("accepted %+v: a nil id", ev)
	}
	title := ev.SelectionTitle
	if n := utf8.RuneCountInString(title); n < 1 || n > MaxTitleRunes || !utf8.ValidString(title) || strings.ContainsRune(title, 0) {
		t.Fatalf("accepted title %q: %d runes, not UTF-8 or with a NUL", title, n)
	}
	if p.SelectionTitle == nil || !strings.HasPrefix(*p.SelectionTitle, title) || ev.TitleRunes != utf8.RuneCountInString(*p.SelectionTitle) {
		t.Fatalf("stored title %q (of %d runes) is not how the title began", title, ev.TitleRunes)
	}
	if ev.TitleTruncated() != (ev.TitleRunes > MaxTitleRunes) || (!ev.TitleTruncated() && title != *p.SelectionTitle) {
		t.Fatalf("title %q truncated %v, but the title came as %q", title, ev.TitleTruncated(), *p.SelectionTitle)
	}
	if ev.PropertyObjectsCount < 0 {
		t.Fatalf("accepted count %d", ev.PropertyObjectsCount)
	}
	if ev.Action != ActionShared && ev.Action != ActionOpened {
		t.Fatalf("accepted Action %q", ev.Action)
	}
	if ev.OccurredAt.IsZero() || ev.OccurredAt.After(time.Now().Add(servicetest.MaxSkew)) {
		t.Fatalf("accepted OccurredAt %s: zero or beyond MAX_CLOCK_SKEW", ev.OccurredAt)
	}
	if !consumer.StorableTime(ev.OccurredAt) {
		t.Fatalf("accepted OccurredAt %s, which PostgreSQL refuses", ev.OccurredAt)
	}
	if _, err := ev.OccurredAt.MarshalJSON(); err != nil {
		t.Fatalf("accepted OccurredAt %s out of range: %v", ev.OccurredAt, err)
	}
	// lead_events.payload is jsonb: the feed payload must come back as it went.
	b, err := json.Marshal(ev.FeedPayload())
	if err != nil {
		t.Fatalf("feed payload of %+v: %v", ev, err)
	}
	var back LeadSelectionPayload
	if err := json.Unmarshal(b, &back); err != nil || back != ev.FeedPayload() {
		t.Fatalf("feed payload %s comes back as %+v (%v)", b, back, err)
	}
}

// messageOf is the runtime's message for a payload written from w.
func messageOf(t *testing.T, svc consumer.Service, w wirePayload) *consumer.Message {
	t.Helper()
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatalf("encode %+v: %v", w, err)
	}
	m, err := servicetest.PayloadMessage(svc, EventType, "Selection", b)
	if err != nil {
		t.Fatalf("written back, the payload is not a readable envelope: %v\n%s", err, b)
	}
	return m
}

func ptr[T any](v T) *T { return &v }
