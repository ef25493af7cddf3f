package crm

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
)

// LogPublisher logs the domain event; a panicking publisher is reported,
// not passed on.
func TestLogPublisherLogsTheDomainEvent(t *testing.T) {
	var buf strings.Builder
	log := zerolog.New(&buf)
	ctx := log.WithContext(context.Background())
	e := LeadEventAdded{LeadID: uuid.New(), EventID: uuid.New(), Type: SelectionViewed}
	LogPublisher(ctx, e)
	var line map[string]any
	if err := json.Unmarshal([]byte(buf.String()), &line); err != nil {
		t.Fatalf("%q: %v", buf.String(), err)
	}
	if line["message"] != "lead-event-added" || line["LeadId"] != e.LeadID.String() ||
		line["EventId"] != e.EventID.String() || line["Type"] != "SelectionViewed" {
		t.Fatalf("log line %v", line)
	}

	buf.Reset()
	publishSafely(ctx, func(context.Context, LeadEventAdded) { panic("boom") }, e)
	if !strings.Contains(buf.String(), "publisher panicked") {
		t.Fatalf("a panicking publisher was not reported: %q", buf.String())
	}
}
