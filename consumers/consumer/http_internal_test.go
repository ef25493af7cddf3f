package consumer

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/internal/secret"
)

// /readyz answers with the reason the consumer is not ready, which may
// quote a database error: it goes through the process's redactor, as its
// log lines do.
func TestReadyzTextIsRedacted(t *testing.T) {
	const pw = "pw\"q\\b\tx"
	r := &Runtime{redact: secret.New(pw).Redact, reg: prometheus.NewRegistry()}
	reason := "schema gate: cannot read the migration history: password " + pw + " refused"
	r.gate.Store(&reason)
	rec := httptest.NewRecorder()
	r.httpHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != 503 || strings.Contains(string(body), pw) || !strings.Contains(string(body), secret.Mask) {
		t.Fatalf("/readyz: %d %q, want 503 with the password masked", rec.Code, body)
	}
}
