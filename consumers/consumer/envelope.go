package consumer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Envelope is the message format of CONTRACT.md §4. Member names are matched
// case-insensitively and unknown members are ignored (encoding/json's
// rules).
type Envelope struct {
	MessageID       uuid.UUID
	EventType       string
	ContractVersion int
	CreatedAt       time.Time // event time
	AggregateID     string
	AggregateType   string
	Payload         json.RawMessage
}

type wireEnvelope struct {
	MessageID       string          `json:"MessageId"`
	EventType       string          `json:"EventType"`
	ContractVersion int             `json:"ContractVersion"`
	CreatedAt       *time.Time      `json:"CreatedAt"`
	AggregateID     string          `json:"AggregateId"`
	AggregateType   string          `json:"AggregateType"`
	Payload         json.RawMessage `json:"Payload"`
}

// DecodeEnvelope reads a message value. A value that is not a JSON object, a
// tombstone, or an envelope without a valid MessageId is an
// EVENT_ENVELOPE_INVALID error.
func DecodeEnvelope(value []byte) (Envelope, error) {
	v := bytes.TrimSpace(value)
	if len(v) == 0 || v[0] != '{' {
		if value == nil {
			return Envelope{}, EnvelopeInvalid.Errorf("null value (tombstone)")
		}
		return Envelope{}, EnvelopeInvalid.Errorf("value is not a JSON object")
	}
	var w wireEnvelope
	if err := json.Unmarshal(v, &w); err != nil {
		return Envelope{}, EnvelopeInvalid.Errorf("unreadable envelope: %v", err)
	}
	if w.MessageID == "" {
		return Envelope{}, EnvelopeInvalid.Errorf("MessageId is missing")
	}
	id, err := uuid.Parse(w.MessageID)
	if err != nil || id == uuid.Nil {
		return Envelope{}, EnvelopeInvalid.Errorf("MessageId %q is not a UUID", w.MessageID)
	}
	e := Envelope{
		MessageID:       id,
		EventType:       w.EventType,
		ContractVersion: w.ContractVersion,
		AggregateID:     w.AggregateID,
		AggregateType:   w.AggregateType,
		Payload:         w.Payload,
	}
	if w.CreatedAt != nil {
		e.CreatedAt = *w.CreatedAt
	}
	return e, nil
}

// DecodePayload decodes the message's Payload into a P. A payload that is
// missing, not an object, or has a member of the wrong type is an error of
// the service's invalid code.
func DecodePayload[P any](m *Message) (P, error) {
	var p P
	v := bytes.TrimSpace(m.Payload)
	if len(v) == 0 || bytes.Equal(v, []byte("null")) {
		return p, m.invalid.Errorf("Payload is missing")
	}
	if v[0] != '{' {
		return p, m.invalid.Errorf("Payload is not a JSON object")
	}
	if err := json.Unmarshal(v, &p); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return p, m.invalid.Errorf("Payload.%s: %s is not a valid %s", te.Field, te.Value, te.Type)
		}
		return p, m.invalid.Errorf("Payload: %v", err)
	}
	return p, nil
}

// Invalid returns an error of the message's service invalid code: for
// handlers' own validation.
func (m *Message) Invalid(format string, args ...any) error {
	return m.invalid.Wrap(fmt.Errorf(format, args...))
}
