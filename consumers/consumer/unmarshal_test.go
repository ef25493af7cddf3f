package consumer

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// diffPayload has the field types the services' payloads use (their wire
// forms: uuid.UUID, pointers to string, int64 and time.Time, time.Time,
// slices of structs, strings).
type diffPayload struct {
	LeadID  uuid.UUID  `json:"LeadId"`
	BondID  *string    `json:"BondId"`
	Version *int64     `json:"Version"`
	BoundAt *time.Time `json:"BoundAt"`
	Count   int64
	At      time.Time `json:"ChangedAt"`
	Title   string
	Members []struct {
		UserID       uuid.UUID `json:"UserId"`
		Role         string
		PreviousRole *string
	} `json:"ActiveParticipants"`
}

// unmarshalCorpus is what the fast decoder must read exactly as
// encoding/json does: valid payloads and envelopes, and the edges where JSON
// decoders are known to differ.
var unmarshalCorpus = []string{
	`{}`,
	` {} `,
	`{"LeadId":"0d6f2b6e-1111-4222-8333-444455556666","BondId":"b","Version":7,"BoundAt":"2026-11-30T09:59:00Z","Count":3,` +
		`"ChangedAt":"2026-11-30T10:00:00.123456+03:00","Title":"t","ActiveParticipants":[{"UserId":"2d6f2b6e-1111-4222-8333-444455556661","Role":"Executor","PreviousRole":null}]}`,
	// Member names: case-insensitive, escaped, repeated (the last wins),
	// unknown members ignored.
	`{"leadid":"0d6f2b6e-1111-4222-8333-444455556666","TITLE":"a","title":"b"}`,
	`{"Lead\u0049d":"0d6f2b6e-1111-4222-8333-444455556666"}`,
	`{"Title":"a","Title":"b","Unknown":{"x":[1,2,{"y":null}]}}`,
	`{"ſcount":1}`, // U+017F folds to s under Unicode simple folding; encoding/json decides
	`{"K":1,"k":2}`,
	// Strings: escapes, surrogates, invalid UTF-8, control characters.
	`{"Title":"\u00e9\n\t\"\\\/"}`,
	`{"Title":"\ud83d\ude00"}`,
	`{"Title":"\ud800"}`,
	`{"Title":"\udc00\ud800x"}`,
	"{\"Title\":\"x\xffy\"}",
	"{\"Title\":\"\xed\xa0\x80\"}",
	"{\"Title\":\"a\x01b\"}",
	`{"Title":"\u0000"}`,
	`{"Title":"\x"}`,
	// Numbers into int64 and *int64.
	`{"Count":-0}`, `{"Count":1e3}`, `{"Count":1.0}`, `{"Count":01}`, `{"Count":+1}`,
	`{"Count":9223372036854775807}`, `{"Count":9223372036854775808}`, `{"Count":-9223372036854775809}`,
	`{"Version":"7"}`, `{"Version":null}`, `{"Version":true}`, `{"Version":[]}`, `{"Count":NaN}`,
	// Types: null for non-pointers, wrong kinds.
	`{"LeadId":null,"Count":null,"Title":null,"ChangedAt":null,"ActiveParticipants":null}`,
	`{"Title":1}`, `{"Title":true}`, `{"ActiveParticipants":{}}`, `{"ActiveParticipants":[1]}`,
	`{"ActiveParticipants":[{"UserId":"x"}]}`, `{"ActiveParticipants":[null,{}]}`,
	// uuid.UUID's and time.Time's own parsers.
	`{"LeadId":"0D6F2B6E-1111-4222-8333-444455556666"}`, `{"LeadId":"{0d6f2b6e-1111-4222-8333-444455556666}"}`,
	`{"LeadId":"urn:uuid:0d6f2b6e-1111-4222-8333-444455556666"}`, `{"LeadId":"0d6f2b6e111142228333444455556666"}`,
	`{"LeadId":"not-a-uuid"}`, `{"LeadId":""}`, `{"LeadId":42}`,
	`{"ChangedAt":"2026-11-30T10:00:00"}`, `{"ChangedAt":"2026-11-30 10:00:00Z"}`, `{"ChangedAt":"2026-11-30T24:00:00Z"}`,
	`{"ChangedAt":1764496800}`, `{"BoundAt":"2026-02-30T00:00:00Z"}`,
	// Not JSON, or not one value.
	``, ` `, `null`, `[]`, `"x"`, `{`, `{"Title":"a"`, `{"Title":"a"}x`, `{"Title":"a"} {}`, `{"Title":'a'}`,
	`{Title:"a"}`, `{"Title":"a",}`, `{"Title" "a"}`, "\xef\xbb\xbf{}", `{"Title":"a"/*c*/}`,
	`{"Count":1}` + strings.Repeat(" ", 100),
	strings.Repeat(`{"x":`, 600) + `1` + strings.Repeat(`}`, 600),
	strings.Repeat(`[`, 20000) + strings.Repeat(`]`, 20000),
	// Envelopes: raw members keep their bytes, whitespace included.
	`{"MessageId":"6f1c2b9e-1111-4222-8333-444455556666","EventType":"e","ContractVersion":"1","CreatedAt":"2026-11-30T10:00:00Z",` +
		`"AggregateId":7,"AggregateType":null,"Payload":{ "a" : [ 1 , 2 ] , "b":"\u00e9" }}`,
	`{"payload":{"x":1},"PAYLOAD":[1]}`,
	`{"Payload":"\ud800","MessageId":{"a":"}"}}`,
}

// TestUnmarshalAgreesWithEncodingJSON holds unmarshal to encoding/json's
// result and error on every input of the corpus, for the envelope's wire
// form, a payload with the services' field types, and a string.
func TestUnmarshalAgreesWithEncodingJSON(t *testing.T) {
	for _, in := range unmarshalCorpus {
		agree[envelopeWire](t, []byte(in))
		agree[diffPayload](t, []byte(in))
		agree[string](t, []byte(in))
	}
	for _, in := range []string{`"a\u00e9"`, "\"x\xffy\"", `"\ud800"`, `"\u0000"`, `null`, `1`} {
		agree[string](t, []byte(in))
	}
}

// FuzzUnmarshalAgrees searches for an input on which unmarshal and
// encoding/json differ: go test -run '^$' -fuzz FuzzUnmarshalAgrees
// ./consumers/consumer (plain go test runs the corpus as seeds).
func FuzzUnmarshalAgrees(f *testing.F) {
	for _, in := range unmarshalCorpus {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		agree[envelopeWire](t, in)
		agree[diffPayload](t, in)
	})
}

func agree[T any](t *testing.T, in []byte) {
	t.Helper()
	var want, got T
	wantErr := json.Unmarshal(in, &want)
	gotErr := unmarshal(in, &got)
	if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
		t.Fatalf("%T from %q: error %v, encoding/json's %v", got, in, gotErr, wantErr)
	}
	if wantErr == nil && !reflect.DeepEqual(want, got) {
		t.Fatalf("%T from %q:\n got %+v\nwant %+v (encoding/json)", got, in, got, want)
	}
}

// BenchmarkDecodePayload measures a payload's decode into a struct of the
// services' field types, with 5 members (go test -bench DecodePayload
// -benchmem ./consumers/consumer).
func BenchmarkDecodePayload(b *testing.B) {
	m := &Message{Envelope: Envelope{Payload: []byte(`{"LeadId":"0d6f2b6e-1111-4222-8333-444455556666","BondId":"0d6f2b6e-1111-4222-8333-444455556667",` +
		`"Version":7,"BoundAt":"2026-11-30T09:59:00Z","ChangedAt":"2026-11-30T10:00:00.123456Z","Title":"t","ActiveParticipants":[` +
		`{"UserId":"2d6f2b6e-1111-4222-8333-444455556661","Role":"Executor"},{"UserId":"2d6f2b6e-1111-4222-8333-444455556662","Role":"Responsible"},` +
		`{"UserId":"2d6f2b6e-1111-4222-8333-444455556663","Role":"CoAgent"},{"UserId":"2d6f2b6e-1111-4222-8333-444455556664","Role":"Lawyer"},` +
		`{"UserId":"2d6f2b6e-1111-4222-8333-444455556665","Role":"Assistant","PreviousRole":null}]}`)}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodePayload[diffPayload](m); err != nil {
			b.Fatal(err)
		}
	}
}
