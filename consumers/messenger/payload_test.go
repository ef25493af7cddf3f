package messenger

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/pin-platform/pin/consumers/consumer"
)

func isCode(err error, c consumer.Code) bool {
	got, ok := consumer.CodeOf(err)
	return ok && got.Name == c.Name
}

func msgWithPayload(raw string) *consumer.Message {
	return &consumer.Message{Envelope: consumer.Envelope{Payload: json.RawMessage(raw)}}
}

func TestDecode(t *testing.T) {
	const lead = `"LeadId":"6f1c2b8e-1f7a-4d2e-9a51-2f0a5e3c9b10"`
	const at = `"ChangedAt":"2026-11-30T10:00:00.1234567+03:00"`
	const one = `"ActiveParticipants":[{"UserId":"00000000-0000-0000-0000-000000000001","Role":"Executor"}]`
	valid := func(extra ...string) string {
		parts := append([]string{lead, at, one, `"Participants":[]`, `"Version":3`}, extra...)
		return "{" + strings.Join(parts, ",") + "}"
	}
	invalid := []struct{ name, payload string }{
		{"no Payload", ``},
		{"null Payload", `null`},
		{"Payload is not an object", `[1,2]`},
		{"LeadId missing", `{` + at + `,` + one + `,"Version":1}`},
		{"LeadId not a UUID", `{"LeadId":"lead-1",` + at + `,` + one + `,"Version":1}`},
		{"Version missing", `{` + lead + `,` + at + `,` + one + `}`},
		{"Version 0", `{` + lead + `,` + at + `,` + one + `,"Version":0}`},
		{"Version negative", `{` + lead + `,` + at + `,` + one + `,"Version":-4}`},
		{"Version a string", `{` + lead + `,` + at + `,` + one + `,"Version":"3"}`},
		{"ChangedAt missing", `{` + lead + `,` + one + `,"Version":1}`},
		{"ChangedAt not a time", `{` + lead + `,"ChangedAt":"yesterday",` + one + `,"Version":1}`},
		{"ActiveParticipants missing", `{` + lead + `,` + at + `,"Version":1}`},
		{"ActiveParticipants null", `{` + lead + `,` + at + `,"ActiveParticipants":null,"Version":1}`},
		{"ActiveParticipants empty", `{` + lead + `,` + at + `,"ActiveParticipants":[],"Version":1}`},
		{"ActiveParticipants an object", `{` + lead + `,` + at + `,"ActiveParticipants":{"UserId":"00000000-0000-0000-0000-000000000001"},"Version":1}`},
		{"a null member", `{` + lead + `,` + at + `,"ActiveParticipants":[null],"Version":1}`},
		{"a member without UserId", `{` + lead + `,` + at + `,"ActiveParticipants":[{"Role":"Executor"}],"Version":1}`},
		{"a member with an empty UserId", `{` + lead + `,` + at + `,"ActiveParticipants":[{"UserId":"","Role":"Executor"}],"Version":1}`},
		{"a member with the nil UserId", `{` + lead + `,` + at + `,"ActiveParticipants":[{"UserId":"00000000-0000-0000-0000-000000000000","Role":"Executor"}],"Version":1}`},
		{"a member without Role", `{` + lead + `,` + at + `,"ActiveParticipants":[{"UserId":"00000000-0000-0000-0000-000000000001"}],"Version":1}`},
		{"a member with a Role of 33 characters", `{` + lead + `,` + at + `,"ActiveParticipants":[{"UserId":"00000000-0000-0000-0000-000000000001","Role":"` + strings.Repeat("R", 33) + `"}],"Version":1}`},
		{"a member with a Role of 33 two-byte characters", `{` + lead + `,` + at + `,"ActiveParticipants":[{"UserId":"00000000-0000-0000-0000-000000000001","Role":"` + strings.Repeat("Ж", 33) + `"}],"Version":1}`},
		{"a Role that is a number", `{` + lead + `,` + at + `,"ActiveParticipants":[{"UserId":"00000000-0000-0000-0000-000000000001","Role":3}],"Version":1}`},
		{"the same user twice with different roles", `{` + lead + `,` + at + `,"ActiveParticipants":[{"UserId":"00000000-0000-0000-0000-000000000001","Role":"Executor"},{"UserId":"00000000-0000-0000-0000-000000000001","Role":"Lawyer"}],"Version":1}`},
		{"Participants not a list", valid(`"Participants":"Added"`)},
	}
	// The original spec marks Participants required and each change's
	// UserId with it: a delta that cannot be read is invalid, not ignored.
	invalid = append(invalid, []struct{ name, payload string }{
		{"Participants missing (required)", `{` + lead + `,` + at + `,` + one + `,"Version":1}`},
		{"Participants null (required)", `{` + lead + `,` + at + `,` + one + `,"Participants":null,"Version":1}`},
		{"a change without UserId", valid(`"Participants":[{"ChangeType":"Added","Role":"CoAgent"}]`)},
		{"a change with the nil UserId", valid(`"Participants":[{"UserId":"00000000-0000-0000-0000-000000000000","ChangeType":"Removed","Role":"CoAgent"}]`)},
	}...)
	for _, tt := range invalid {
		t.Run("invalid: "+tt.name, func(t *testing.T) {
			_, err := decode(msgWithPayload(tt.payload))
			if !isCode(err, CodeInvalid) {
				t.Fatalf("err = %v, want %s", err, CodeInvalid.Name)
			}
		})
	}

	t.Run("member names are case-insensitive; roles in the spec's spelling", func(t *testing.T) {
		s, err := decode(msgWithPayload(`{"leadid":"6f1c2b8e-1f7a-4d2e-9a51-2f0a5e3c9b10","changedAt":"2026-11-30T10:00:00Z",
			"activeparticipants":[{"userid":"00000000-0000-0000-0000-000000000002","role":"investorprimary"},{"USERID":"00000000-0000-0000-0000-000000000001","ROLE":"EXECUTOR"}],
			"participants":[{"userId":"00000000-0000-0000-0000-000000000002","changeType":"added","role":"InvestorPrimary"}],"version":7,"TenantId":"x","ChangedByUserId":"y","Extra":1}`))
		if err != nil {
			t.Fatal(err)
		}
		if s.Version != 7 || s.LeadID.String() != "6f1c2b8e-1f7a-4d2e-9a51-2f0a5e3c9b10" {
			t.Fatalf("snapshot %+v", s)
		}
		want := []member{m(1, RoleExecutor), m(2, RoleInvestorPrimary)}
		if len(s.Target) != 2 || s.Target[0] != want[0] || s.Target[1] != want[1] {
			t.Fatalf("target %v, want %v (sorted, canonical roles)", s.Target, want)
		}
		if len(s.Delta) != 1 || s.Delta[0].ChangeType != ChangeAdded {
			t.Fatalf("delta %+v", s.Delta)
		}
	})
	t.Run("an empty Participants is an empty delta", func(t *testing.T) {
		s, err := decode(msgWithPayload(`{` + lead + `,` + at + `,` + one + `,"Participants":[],"Version":1}`))
		if err != nil || len(s.Delta) != 0 || len(s.Target) != 1 {
			t.Fatalf("snapshot %+v, err %v", s, err)
		}
	})
	t.Run("an unknown role and an unknown ChangeType are accepted and reported", func(t *testing.T) {
		s, err := decode(msgWithPayload(valid(`"ActiveParticipants":[{"UserId":"00000000-0000-0000-0000-000000000001","Role":"Notary"}]`,
			`"Participants":[{"UserId":"00000000-0000-0000-0000-000000000001","ChangeType":"Teleported","Role":"Notary"}]`)))
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Target) != 1 || s.Target[0].Role != "Notary" || len(s.UnknownRoles) != 1 {
			t.Fatalf("target %v, unknown roles %v", s.Target, s.UnknownRoles)
		}
		if len(s.UnknownChanges) != 1 || s.UnknownChanges[0].ChangeType != "Teleported" || len(s.Delta) != 0 {
			t.Fatalf("unknown changes %+v, delta %+v", s.UnknownChanges, s.Delta)
		}
	})
	t.Run("an unknown role is measured in characters, as varchar(32) is", func(t *testing.T) {
		for _, role := range []string{"Внешнийнаблюдатель", strings.Repeat("Ж", 32), strings.Repeat("𝔑", 32)} { // 36, 64 and 128 bytes
			s, err := decode(msgWithPayload(valid(`"ActiveParticipants":[{"UserId":"00000000-0000-0000-0000-000000000001","Role":"` + role + `"}]`)))
			if err != nil {
				t.Fatalf("role of %d bytes, %d characters: %v", len(role), utf8.RuneCountInString(role), err)
			}
			if len(s.Target) != 1 || s.Target[0].Role != role || len(s.UnknownRoles) != 1 {
				t.Fatalf("target %v, unknown roles %v", s.Target, s.UnknownRoles)
			}
		}
	})
	t.Run("an exact repeat is folded", func(t *testing.T) {
		s, err := decode(msgWithPayload(valid(`"ActiveParticipants":[{"UserId":"00000000-0000-0000-0000-000000000001","Role":"CoAgent"},{"UserId":"00000000-0000-0000-0000-000000000001","Role":"coagent"}]`)))
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Target) != 1 || s.Target[0].Role != RoleCoAgent || s.Folded != 1 {
			t.Fatalf("target %v folded %d", s.Target, s.Folded)
		}
	})
}
