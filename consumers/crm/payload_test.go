package crm

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
)

func TestTruncateRunes(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		n         int
		want      string
		wantRunes int
	}{
		{"short ASCII is kept", "abc", 5, "abc", 3},
		{"exactly n is kept", "abcde", 5, "abcde", 5},
		{"ASCII is cut", "abcdef", 5, "abcde", 6},
		{"Cyrillic (2 bytes) is cut on a rune boundary", "подборка", 3, "под", 8},
		{"CJK (3 bytes) is cut on a rune boundary", "物件一覧表", 2, "物件", 5},
		{"emoji (4 bytes) is cut on a rune boundary", "🏠🏡🏢🏣", 3, "🏠🏡🏢", 4},
		{"mixed widths", "a€𝄞bц", 4, "a€𝄞b", 5},
		{"empty", "", 3, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, runes := truncateRunes(tt.in, tt.n)
			if got != tt.want || runes != tt.wantRunes {
				t.Fatalf("truncateRunes(%q, %d) = %q, %d; want %q, %d", tt.in, tt.n, got, runes, tt.want, tt.wantRunes)
			}
			if !utf8.ValidString(got) {
				t.Fatalf("result %q is not valid UTF-8", got)
			}
		})
	}
}

func TestParseAction(t *testing.T) {
	tests := []struct {
		in   string
		want Action
		ok   bool
	}{
		{"Shared", ActionShared, true},
		{"shared", ActionShared, true},
		{"SHARED", ActionShared, true},
		{"Opened", ActionOpened, true},
		{"oPeNeD", ActionOpened, true},
		{"Viewed", "", false},
		{" Shared", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, ok := ParseAction(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseAction(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
	if ActionShared.EventType() != SelectionAttached || ActionOpened.EventType() != SelectionViewed {
		t.Fatal("Shared must map to SelectionAttached and Opened to SelectionViewed")
	}
}

// validPayload returns a payload that passes validation, as a map the cases
// can change.
func validPayload() map[string]any {
	return map[string]any{
		"SelectionId":          "6f1c2b1e-1b7a-4c39-9d1f-0e2a3b4c5d6e",
		"SelectionTitle":       "Квартиры у парка",
		"PropertyObjectsCount": 12,
		"Action":               "Shared",
		"AgentUserId":          "0b8f5b6e-8d1a-4c1e-9a61-3b3c1d7a9e01",
		"InvestorUserId":       "5a0e4c8b-2d6f-4f9b-8c3a-7e1d2b4f6a02",
		"OccurredAt":           "2026-11-30T10:00:00.1234567+03:00",
	}
}

func decodeWire(t *testing.T, m map[string]any) wirePayload {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var p wirePayload
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	return p
}

func TestValidate(t *testing.T) {
	t.Run("a valid payload maps field by field", func(t *testing.T) {
		ev, err := decodeWire(t, validPayload()).validate()
		if err != nil {
			t.Fatal(err)
		}
		wantAt := time.Date(2026, 11, 30, 7, 0, 0, 123456700, time.UTC)
		if ev.SelectionID != uuid.MustParse("6f1c2b1e-1b7a-4c39-9d1f-0e2a3b4c5d6e") ||
			ev.SelectionTitle != "Квартиры у парка" || ev.PropertyObjectsCount != 12 ||
			ev.Action != ActionShared || !ev.OccurredAt.Equal(wantAt) ||
			ev.AgentUserID != uuid.MustParse("0b8f5b6e-8d1a-4c1e-9a61-3b3c1d7a9e01") ||
			ev.InvestorUserID != uuid.MustParse("5a0e4c8b-2d6f-4f9b-8c3a-7e1d2b4f6a02") ||
			ev.TitleTruncated() {
			t.Fatalf("unexpected event %+v", ev)
		}
		b, _ := json.Marshal(ev.FeedPayload())
		want := `{"SelectionId":"6f1c2b1e-1b7a-4c39-9d1f-0e2a3b4c5d6e","SelectionTitle":"Квартиры у парка","PropertyObjectsCount":12}`
		if string(b) != want {
			t.Fatalf("feed payload %s, want %s", b, want)
		}
	})
	t.Run("member names are matched case-insensitively", func(t *testing.T) {
		m := map[string]any{}
		for k, v := range validPayload() {
			m[strings.ToLower(k)] = v
		}
		m["action"] = "opened"
		ev, err := decodeWire(t, m).validate()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Action != ActionOpened {
			t.Fatalf("Action %q, want Opened", ev.Action)
		}
	})
	t.Run("the widest offsets and the earliest times PostgreSQL stores are valid", func(t *testing.T) {
		for _, at := range []string{"2026-11-30T10:00:00+15:59", "2026-11-30T10:00:00-15:59", "0001-01-01T00:30:00-01:00", "0001-01-01T00:30:00+01:00"} {
			m := validPayload()
			m["OccurredAt"] = at
			b, _ := json.Marshal(m)
			if _, _, err := decode(consumer.NewMessage(consumer.Envelope{Payload: b}, CodeEventInvalid, 24*time.Hour)); err != nil {
				t.Fatalf("OccurredAt %s: %v", at, err)
			}
		}
	})
	t.Run("a zero count is valid", func(t *testing.T) {
		m := validPayload()
		m["PropertyObjectsCount"] = 0
		if _, err := decodeWire(t, m).validate(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a title over 256 runes is cut, not rejected", func(t *testing.T) {
		m := validPayload()
		m["SelectionTitle"] = strings.Repeat("дом🏠", 75) // 300 runes, 750 bytes
		ev, err := decodeWire(t, m).validate()
		if err != nil {
			t.Fatal(err)
		}
		if n := utf8.RuneCountInString(ev.SelectionTitle); n != MaxTitleRunes || !ev.TitleTruncated() || ev.TitleRunes != 300 {
			t.Fatalf("title of %d runes (truncated %v, from %d), want 256 from 300", n, ev.TitleTruncated(), ev.TitleRunes)
		}
		if !utf8.ValidString(ev.SelectionTitle) || !strings.HasPrefix(strings.Repeat("дом🏠", 75), ev.SelectionTitle) {
			t.Fatal("the cut title is not a rune-boundary prefix of the original")
		}
	})

	invalid := []struct {
		name    string
		change  func(m map[string]any)
		unknown bool
		reason  string
	}{
		{"SelectionId missing", func(m map[string]any) { delete(m, "SelectionId") }, false, "SelectionId is missing"},
		{"SelectionId null", func(m map[string]any) { m["SelectionId"] = nil }, false, "SelectionId is missing"},
		{"SelectionId not a GUID", func(m map[string]any) { m["SelectionId"] = "abc" }, false, "SelectionId \"abc\" is not a GUID"},
		{"SelectionId empty GUID", func(m map[string]any) { m["SelectionId"] = uuid.Nil.String() }, false, "SelectionId is the empty GUID"},
		{"SelectionTitle missing", func(m map[string]any) { delete(m, "SelectionTitle") }, false, "SelectionTitle is missing"},
		{"SelectionTitle empty", func(m map[string]any) { m["SelectionTitle"] = "" }, false, "SelectionTitle is empty"},
		{"SelectionTitle with NUL", func(m map[string]any) { m["SelectionTitle"] = "a\x00b" }, false, "NUL"},
		{"PropertyObjectsCount missing", func(m map[string]any) { delete(m, "PropertyObjectsCount") }, false, "PropertyObjectsCount is missing"},
		{"PropertyObjectsCount negative", func(m map[string]any) { m["PropertyObjectsCount"] = -1 }, false, "must be ≥ 0"},
		{"PropertyObjectsCount over int32", func(m map[string]any) { m["PropertyObjectsCount"] = int64(1) << 31 }, false, "more than an int holds"},
		{"AgentUserId missing", func(m map[string]any) { delete(m, "AgentUserId") }, false, "AgentUserId is missing"},
		{"InvestorUserId not a GUID", func(m map[string]any) { m["InvestorUserId"] = "x" }, false, "InvestorUserId \"x\" is not a GUID"},
		{"OccurredAt missing", func(m map[string]any) { delete(m, "OccurredAt") }, false, "OccurredAt is missing"},
		{"OccurredAt without offset", func(m map[string]any) { m["OccurredAt"] = "2026-11-30T10:00:00" }, false, "not an RFC 3339"},
		{"OccurredAt zero", func(m map[string]any) { m["OccurredAt"] = "0001-01-01T00:00:00Z" }, false, "zero time"},
		{"Action missing", func(m map[string]any) { delete(m, "Action") }, false, "Action is missing"},
		{"Action empty", func(m map[string]any) { m["Action"] = "" }, false, "Action is missing"},
		{"Action unknown", func(m map[string]any) { m["Action"] = "Forwarded" }, true, "Action \"Forwarded\" is not a SelectionShareAction"},
		{"Action unknown and another violation", func(m map[string]any) {
			m["Action"] = "Forwarded"
			delete(m, "AgentUserId")
		}, false, "AgentUserId is missing; Action \"Forwarded\""},
	}
	for _, tt := range invalid {
		t.Run("invalid: "+tt.name, func(t *testing.T) {
			m := validPayload()
			tt.change(m)
			_, err := decodeWire(t, m).validate()
			if err == nil {
				t.Fatal("validate accepted the payload")
			}
			if err.unknownAction != tt.unknown {
				t.Fatalf("unknownAction = %v, want %v (%v)", err.unknownAction, tt.unknown, err)
			}
			if !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("reason %q does not say %q", err.Error(), tt.reason)
			}
		})
	}
}

// CRM_SELECTION_UNKNOWN_ACTION says the Action is the payload's one fault;
// an OccurredAt beyond MAX_CLOCK_SKEW is another, so the event is
// CRM_SELECTION_EVENT_INVALID, and its reason names both (a finding of
// FuzzDecodeCRM: testdata/fuzz/FuzzDecodeCRM/421e6ffbe5e33174).
func TestDecodeUnknownActionOnlyAsTheOneFault(t *testing.T) {
	recent := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano)
	const far = "7000-01-10T00:00:00Z"
	for _, c := range []struct {
		name, action, occurredAt string
		noAgent                  bool
		code                     string
		reason                   []string
	}{
		{"unknown action", "Forwarded", recent, false, CodeUnknownAction.Name, []string{`Action "Forwarded"`}},
		{"unknown action and a time too far ahead", "Forwarded", far, false, CodeEventInvalid.Name, []string{`Action "Forwarded"`, "MAX_CLOCK_SKEW"}},
		{"a time too far ahead", "Shared", far, false, CodeEventInvalid.Name, []string{"MAX_CLOCK_SKEW"}},
		{"unknown action, no agent, a time too far ahead", "Forwarded", far, true, CodeEventInvalid.Name, []string{"AgentUserId is missing", `Action "Forwarded"`, "MAX_CLOCK_SKEW"}},
		{"a time in year 0000", "Shared", "0000-06-01T00:00:00Z", false, CodeEventInvalid.Name, []string{"not a time PostgreSQL stores"}},
		{"a time 16 hours from UTC", "Shared", "2026-11-30T10:00:00+16:00", false, CodeEventInvalid.Name, []string{"not a time PostgreSQL stores"}},
		{"unknown action and an offset of -23:59", "Forwarded", "2026-11-30T10:00:00-23:59", false, CodeEventInvalid.Name, []string{`Action "Forwarded"`, "not a time PostgreSQL stores"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := validPayload()
			p["Action"], p["OccurredAt"] = c.action, c.occurredAt
			if c.noAgent {
				delete(p, "AgentUserId")
			}
			b, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			m := consumer.NewMessage(consumer.Envelope{Payload: b}, CodeEventInvalid, 24*time.Hour)
			_, _, err = decode(m)
			if code, ok := consumer.CodeOf(err); !ok || code.Name != c.code {
				t.Fatalf("err = %v, want %s", err, c.code)
			}
			for _, r := range c.reason {
				if !strings.Contains(err.Error(), r) {
					t.Errorf("reason %q does not say %q", err, r)
				}
			}
		})
	}
}
