package consumer

import (
	"bytes"
	"encoding/json"
	"testing"
)

// unmarshalMembers is what envelopeMembers stands in for: encoding/json's
// own reading of the envelope's members, raw.
func unmarshalMembers(v []byte) (rawEnvelope, error) {
	var w struct {
		MessageID       json.RawMessage `json:"MessageId"`
		EventType       json.RawMessage `json:"EventType"`
		ContractVersion json.RawMessage `json:"ContractVersion"`
		CreatedAt       json.RawMessage `json:"CreatedAt"`
		AggregateID     json.RawMessage `json:"AggregateId"`
		AggregateType   json.RawMessage `json:"AggregateType"`
		Payload         json.RawMessage `json:"Payload"`
	}
	err := json.Unmarshal(v, &w)
	return rawEnvelope(w), err
}

// sameMembersAsUnmarshal fails t when envelopeMembers and json.Unmarshal
// read v (a value that starts with '{') differently: one refuses it and
// the other does not, or a member differs, or is absent in one only.
func sameMembersAsUnmarshal(t *testing.T, v []byte) {
	t.Helper()
	got, gotErr := envelopeMembers(v)
	want, wantErr := unmarshalMembers(v)
	if (gotErr != nil) != (wantErr != nil) {
		t.Fatalf("%q: envelopeMembers error %v, json.Unmarshal's %v", v, gotErr, wantErr)
	}
	if gotErr != nil {
		if gotErr.Error() != wantErr.Error() {
			t.Fatalf("%q: error %q, want json.Unmarshal's %q", v, gotErr, wantErr)
		}
		return
	}
	for _, f := range []struct {
		name      string
		got, want json.RawMessage
	}{
		{"MessageId", got.MessageID, want.MessageID}, {"EventType", got.EventType, want.EventType},
		{"ContractVersion", got.ContractVersion, want.ContractVersion}, {"CreatedAt", got.CreatedAt, want.CreatedAt},
		{"AggregateId", got.AggregateID, want.AggregateID}, {"AggregateType", got.AggregateType, want.AggregateType},
		{"Payload", got.Payload, want.Payload},
	} {
		if !bytes.Equal(f.got, f.want) || (f.got == nil) != (f.want == nil) {
			t.Fatalf("%q: %s = %q, json.Unmarshal's %q", v, f.name, f.got, f.want)
		}
	}
}

// envelopeMembers reads an envelope's members as json.Unmarshal does:
// names in any case (Unicode folding: ſ is s, K is k), the last of a
// member given twice, escaped names, white space anywhere, values of any
// type with brackets and quotes inside strings, and the same refusals.
func TestEnvelopeMembersAsUnmarshal(t *testing.T) {
	for _, v := range []string{
		`{}`,
		` { } `,
		`{"MessageId":"a","EventType":"b","ContractVersion":1,"CreatedAt":"c","AggregateId":"d","AggregateType":"e","Payload":{"x":[1,2,{"y":"}]\"{"}]}}`,
		"{\n\t\"messageid\" :\r\n \"a\" , \"EVENTTYPE\":\"b\"\n}",
		`{"MessageId":"a","messageId":"b"}`,
		`{"Payload":{"a":1},"payload":null}`,
		`{"Payload":null}`,
		`{"Payload":[]}`,
		`{"Payload":"{\"x\":1}"}`,
		`{"Message\u0049d":"esc","Event\"Type":"not it"}`,
		`{"Meſſageid":"long s","AggregateTyPe":"x","\u212Aey":1}`,
		`{"ContractVersion":-1.5e+3,"AggregateId":true,"AggregateType":false,"CreatedAt":null}`,
		`{"Other":{"MessageId":"nested"},"MessageId":"top"}`,
		`{"EventType":"\\"}`,
		`{"EventType":"a\\\"b"}`,
		`{"ContractVersion":1}`,
		`{"ContractVersion":1 }`,
		// refused
		`{`, `{"MessageId"}`, `{"MessageId":}`, `{"a":1,}`, `{"a":1} x`, `{"a":01}`, `{"a":"\x"}`, `{'a':1}`, `{"a":1}}`,
		`{"a":[1,2}`, `{"a":tru}`,
	} {
		sameMembersAsUnmarshal(t, []byte(v))
	}
}

// BenchmarkEnvelopeMembers compares the split with json.Unmarshal's
// reading (go test -bench EnvelopeMembers -benchmem ./consumers/consumer).
func BenchmarkEnvelopeMembers(b *testing.B) {
	v := []byte(`{"MessageId":"6f1c2b9e-1111-4222-8333-444455556666","EventType":"pin.crm.lead-participants-changed","ContractVersion":1,` +
		`"CreatedAt":"2026-11-30T10:00:00.123456Z","AggregateId":"0d6f2b6e-1111-4222-8333-444455556666","AggregateType":"Lead",` +
		`"Payload":{"LeadId":"0d6f2b6e-1111-4222-8333-444455556666","Version":7,"ChangedAt":"2026-11-30T09:59:00Z","ActiveParticipants":[` +
		`{"UserId":"1d6f2b6e-1111-4222-8333-444455556666","Role":"Executor"},{"UserId":"2d6f2b6e-1111-4222-8333-444455556666","Role":"Investor"},` +
		`{"UserId":"3d6f2b6e-1111-4222-8333-444455556666","Role":"Observer"}],"Participants":[` +
		`{"UserId":"3d6f2b6e-1111-4222-8333-444455556666","ChangeType":"Added","Role":"Observer","PreviousRole":null}]}}`)
	for _, c := range []struct {
		name string
		read func([]byte) (rawEnvelope, error)
	}{{"split", envelopeMembers}, {"unmarshal", unmarshalMembers}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.read(v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
