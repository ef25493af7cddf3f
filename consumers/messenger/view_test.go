package messenger

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
)

// read always returns a view, an empty one when no message decodes.
func TestReadAlwaysHasAView(t *testing.T) {
	t.Parallel()
	bad := &consumer.Message{Envelope: consumer.Envelope{MessageID: uuid.New(), EventType: EventType,
		ContractVersion: 1, Payload: json.RawMessage(`{"LeadId": 7}`)}, Topic: Topic}
	v, err := read(context.Background(), nil, []*consumer.Message{bad})
	if err != nil || v == nil || len(v.chats) != 0 {
		t.Fatalf("read of an undecodable message: %+v, %v; want an empty view", v, err)
	}
}
