package rewards

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
)

const (
	bond1    = "0b0b0b0b-0000-4000-8000-000000000001"
	referred = "0a0a0a0a-0000-4000-8000-000000000002"
	referrer = "0c0c0c0c-0000-4000-8000-000000000003"
	company  = "0d0d0d0d-0000-4000-8000-000000000004"
	nilUUID  = "00000000-0000-0000-0000-000000000000"
)

func TestCreatedValidation(t *testing.T) {
	valid := `{"BondId":"` + bond1 + `","ReferredUserId":"` + referred + `","ReferrerUserId":"` + referrer +
		`","ReferrerCompanyId":"` + company + `","BoundAt":"2026-11-30T10:00:00+03:00","Version":1,` +
		`"ReferralLinkId":"x","Channel":"Link","AppliedRule":"R1"}`
	for _, c := range []struct {
		name    string
		payload string
		wantErr string // substring; "" = valid
	}{
		{"valid", valid, ""},
		{"member names in any case", `{"bondid":"` + bond1 + `","REFERREDUSERID":"` + referred + `","referrerUserId":"` + referrer + `","boundAt":"2026-11-30T10:00:00Z","version":3}`, ""},
		{"company null", `{"BondId":"` + bond1 + `","ReferredUserId":"` + referred + `","ReferrerUserId":"` + referrer + `","ReferrerCompanyId":null,"BoundAt":"2026-11-30T10:00:00Z","Version":1}`, ""},
		{"BondId missing", `{"ReferredUserId":"` + referred + `","ReferrerUserId":"` + referrer + `","BoundAt":"2026-11-30T10:00:00Z","Version":1}`, "BondId is missing"},
		{"BondId empty string", `{"BondId":"","ReferredUserId":"` + referred + `","ReferrerUserId":"` + referrer + `","BoundAt":"2026-11-30T10:00:00Z","Version":1}`, "BondId is missing"},
		{"BondId Guid.Empty", `{"BondId":"` + nilUUID + `","ReferredUserId":"` + referred + `","ReferrerUserId":"` + referrer + `","BoundAt":"2026-11-30T10:00:00Z","Version":1}`, "BondId is empty"},
		{"ReferredUserId Guid.Empty", `{"BondId":"` + bond1 + `","ReferredUserId":"` + nilUUID + `","ReferrerUserId":"` + referrer + `","BoundAt":"2026-11-30T10:00:00Z","Version":1}`, "ReferredUserId is empty"},
		{"ReferrerUserId missing", `{"BondId":"` + bond1 + `","ReferredUserId":"` + referred + `","BoundAt":"2026-11-30T10:00:00Z","Version":1}`, "ReferrerUserId is missing"},
		{"ReferrerUserId not a UUID", `{"BondId":"` + bond1 + `","ReferredUserId":"` + referred + `","ReferrerUserId":"nope","BoundAt":"2026-11-30T10:00:00Z","Version":1}`, `ReferrerUserId "nope" is not a UUID`},
		{"ReferrerCompanyId not a UUID", `{"BondId":"` + bond1 + `","ReferredUserId":"` + referred + `","ReferrerUserId":"` + referrer + `","ReferrerCompanyId":"x","BoundAt":"2026-11-30T10:00:00Z","Version":1}`, "ReferrerCompanyId"},
		{"BoundAt missing", `{"BondId":"` + bond1 + `","ReferredUserId":"` + referred + `","ReferrerUserId":"` + referrer + `","Version":1}`, "BoundAt is missing"},
		{"Version missing", `{"BondId":"` + bond1 + `","ReferredUserId":"` + referred + `","ReferrerUserId":"` + referrer + `","BoundAt":"2026-11-30T10:00:00Z"}`, "Version is missing"},
		{"Version 0", `{"BondId":"` + bond1 + `","ReferredUserId":"` + referred + `","ReferrerUserId":"` + referrer + `","BoundAt":"2026-11-30T10:00:00Z","Version":0}`, "Version 0 is < 1"},
		{"Version negative", `{"BondId":"` + bond1 + `","ReferredUserId":"` + referred + `","ReferrerUserId":"` + referrer + `","BoundAt":"2026-11-30T10:00:00Z","Version":-4}`, "Version -4 is < 1"},
		{"all violations named", `{}`, "BondId is missing; ReferredUserId is missing; ReferrerUserId is missing; BoundAt is missing; Version is missing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var w createdWire
			if err := json.Unmarshal([]byte(c.payload), &w); err != nil {
				t.Fatal(err)
			}
			p, err := w.validate()
			checkValidation(t, err, c.wantErr)
			if c.wantErr == "" && (p.BondID != uuid.MustParse(bond1) || p.ReferredUserID != uuid.MustParse(referred) || p.Version < 1 || p.BoundAt.IsZero()) {
				t.Errorf("decoded %+v", p)
			}
		})
	}

	var w createdWire
	_ = json.Unmarshal([]byte(valid), &w)
	p, err := w.validate()
	if err != nil {
		t.Fatal(err)
	}
	if p.ReferrerCompanyID == nil || *p.ReferrerCompanyID != uuid.MustParse(company) {
		t.Errorf("ReferrerCompanyId = %v", p.ReferrerCompanyID)
	}
	if want := time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC); !p.BoundAt.Equal(want) {
		t.Errorf("BoundAt = %s, want %s", p.BoundAt, want)
	}
}

func TestClosedValidation(t *testing.T) {
	base := func(status string) string {
		return `{"BondId":"` + bond1 + `","ReferredUserId":"` + referred + `","Status":` + status + `,"Version":2,"RevokeReason":"fraud"}`
	}
	for _, c := range []struct {
		name       string
		payload    string
		wantErr    string
		wantStatus Status
		wantKnown  bool
	}{
		{"Revoked", base(`"Revoked"`), "", StatusRevoked, true},
		{"revoked lower case", base(`"revoked"`), "", StatusRevoked, true},
		{"REPLACED upper case", `{"BondId":"` + bond1 + `","ReferredUserId":"` + referred + `","Status":"REPLACED","ReplacedByBondId":"` + referrer + `","Version":2}`, "", StatusReplaced, true},
		{"unknown status kept as it came", base(`"frozen"`), "", "frozen", false},
		{"status of 32 characters", base(`"` + strings.Repeat("x", 32) + `"`), "", Status(strings.Repeat("x", 32)), false},
		{"status longer than the column", base(`"` + strings.Repeat("x", 33) + `"`), "longer than 32", "", false},
		{"status missing", `{"BondId":"` + bond1 + `","ReferredUserId":"` + referred + `","Version":2}`, "Status is missing", "", false},
		{"status blank", base(`"  "`), "Status is missing", "", false},
		{"status Active is not a closing status", base(`"active"`), "not a closing status", "", false},
		{"BondId empty", `{"BondId":"` + nilUUID + `","ReferredUserId":"` + referred + `","Status":"Revoked","Version":2}`, "BondId is empty", "", false},
		{"ReferredUserId missing", `{"BondId":"` + bond1 + `","Status":"Revoked","Version":2}`, "ReferredUserId is missing", "", false},
		{"ReplacedByBondId required when Status is Replaced", `{"BondId":"` + bond1 + `","ReferredUserId":"` + referred + `","Status":"Replaced","Version":2}`, "ReplacedByBondId is missing (required when Status is Replaced)", "", false},
		{"ReplacedByBondId required when Status is replaced in any case", `{"BondId":"` + bond1 + `","ReferredUserId":"` + referred + `","Status":"replaced","ReplacedByBondId":null,"Version":2}`, "ReplacedByBondId is missing", "", false},
		{"ReplacedByBondId not empty when Status is Replaced", `{"BondId":"` + bond1 + `","ReferredUserId":"` + referred + `","Status":"Replaced","ReplacedByBondId":"` + nilUUID + `","Version":2}`, "ReplacedByBondId is empty", "", false},
		{"ReplacedByBondId not required when Status is Revoked", base(`"Revoked"`), "", StatusRevoked, true},
		{"ReplacedByBondId not a UUID", `{"BondId":"` + bond1 + `","ReferredUserId":"` + referred + `","Status":"Replaced","ReplacedByBondId":"?","Version":2}`, "ReplacedByBondId", "", false},
		{"Version 0", `{"BondId":"` + bond1 + `","ReferredUserId":"` + referred + `","Status":"Revoked","Version":0}`, "Version 0 is < 1", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var w closedWire
			if err := json.Unmarshal([]byte(c.payload), &w); err != nil {
				t.Fatal(err)
			}
			p, err := w.validate()
			checkValidation(t, err, c.wantErr)
			if c.wantErr == "" && (p.Status != c.wantStatus || p.StatusKnown != c.wantKnown) {
				t.Errorf("Status = %q known %t, want %q known %t", p.Status, p.StatusKnown, c.wantStatus, c.wantKnown)
			}
		})
	}
}

func checkValidation(t *testing.T, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("no error, want one containing %q", want)
	}
	if code, ok := consumer.CodeOf(err); !ok || code.Name != CodeInvalid.Name {
		t.Errorf("error %v has code %v, want %s", err, code.Name, CodeInvalid.Name)
	}
	if !errors.Is(err, CodeInvalid.Errorf("")) {
		t.Errorf("errors.Is(%v, CodeInvalid) = false", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not contain %q", err, want)
	}
}
