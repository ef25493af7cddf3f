package messenger

import (
	"testing"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer/consumertest"
)

// The spec's Observability section: log events with MessageId, LeadId,
// ChatId, Version and the counts; metrics under the spec's names; a
// ContractVersion mismatch is warned about, counted and processed.
func TestObservability(t *testing.T) {
	t.Parallel()
	e := newEnv(t, consumertest.Options{})
	lead, a, b := uuid.New(), uuid.New(), uuid.New()
	chatID := e.provision(lead)

	v1 := newEv(lead, 1, member{a, RoleExecutor}, member{b, RoleAssistant})
	// v1 under another ContractVersion.
	env := v1.envelope()
	env.ContractVersion = 2
	mismatched := env.Message(lead, -1, nil)
	v2 := newEv(lead, 2, member{a, RoleExecutor}, member{b, RoleCoAgent})
	v3 := newEv(lead, 3, member{a, RoleExecutor})
	tps := e.Produce(mismatched)
	tps = append(tps, e.produce(v2, v3)...)
	e.awaitOutcome(v1.ID, Synced)
	e.awaitOutcome(v3.ID, Synced)
	e.awaitCommitted(tps...)

	if n := e.Run.Counter("messenger_lead_participants_contract_mismatch_total", nil); n != 1 {
		t.Fatalf("messenger_lead_participants_contract_mismatch_total = %v, want 1", n)
	}
	if got := e.Logs.Find("contract-version-mismatch", map[string]any{"level": "warn", "MessageId": v1.ID.String()}); len(got) != 1 {
		t.Fatalf("%d contract-version-mismatch warnings, want 1", len(got))
	}
	for _, x := range []struct {
		ev                    ev
		added, removed, roles float64
	}{{v1, 2, 0, 0}, {v2, 0, 0, 1}, {v3, 0, 1, 0}} {
		base := map[string]any{"MessageId": x.ev.ID.String(), "LeadId": lead.String(), "Version": float64(x.ev.Version)}
		if got := e.Logs.Find("consumed", base); len(got) != 0 {
			t.Errorf("v%d: %d consumed lines at the default level, want 0 (debug: the outcome line carries its fields)", x.ev.Version, len(got))
		}
		synced := map[string]any{"ChatId": chatID.String(), "added": x.added, "removed": x.removed, "roleChanged": x.roles, "outcome": "synced"}
		for k, v := range base {
			synced[k] = v
		}
		if got := e.Logs.Find("synced", synced); len(got) != 1 {
			t.Errorf("v%d: %d synced log lines with %v, want 1", x.ev.Version, len(got), synced)
		}
	}
	for name, want := range map[string]float64{
		"messenger_participants_added_total":              2,
		"messenger_participants_removed_total":            1,
		"messenger_lead_participants_stale_total":         0,
		"messenger_lead_participants_consume_duration_ms": 3, // sample count
	} {
		if got := e.Run.Counter(name, nil); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	mfs, err := e.Run.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	for _, name := range []string{"messenger_lead_participants_lag_seconds", "messenger_lead_participants_consume_duration_ms",
		"messenger_participants_added_total", "messenger_participants_removed_total", "messenger_lead_participants_stale_total",
		"messenger_lead_participants_contract_mismatch_total"} {
		if !have[name] {
			t.Errorf("metric %s is not exported", name)
		}
	}
}
