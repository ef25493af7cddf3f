package observability

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pin-platform/pin/consumers/demo"
	"github.com/pin-platform/pin/consumers/demo/demotest"
	"github.com/pin-platform/pin/migrate/pgtest"
)

// The fields each spec's log lines carry, by outcome: what every outcome
// line at the default level must hold (besides MessageId), the handler
// having run or not (a duplicate, a dead letter). A field holds "or"
// alternatives as a|b.
var specFields = map[string]map[string][]string{
	"rewards": { // BondId, ReferredUserId, payload.Version, row.ReplicaVersion, Status
		"created":                {"BondId", "ReferredUserId", "Version", "Status"},
		"updated":                {"BondId", "ReferredUserId", "Version", "ReplicaVersion", "Status"},
		"closed":                 {"BondId", "ReferredUserId", "Version", "ReplicaVersion", "Status"},
		"skipped-stale":          {"BondId", "ReferredUserId", "Version", "ReplicaVersion", "Status"},
		"skipped-already-closed": {"BondId", "ReferredUserId", "Version", "ReplicaVersion", "Status"},
		"skipped-duplicate":      {"BondId", "ReferredUserId", "Version", "ReplicaVersion", "Status"},
		"dead-lettered":          {"BondId", "ReferredUserId", "Version", "Status|EventStatus"},
	},
	"messenger": { // LeadId, ChatId, payload.Version
		"synced":            {"LeadId", "ChatId", "Version"},
		"skipped-stale":     {"LeadId", "ChatId", "Version"},
		"skipped-duplicate": {"LeadId", "ChatId", "Version"},
		"parked":            {"LeadId", "Version"}, // retry-not-provisioned: no chat yet
		"dead-lettered":     {"LeadId", "Version"},
	},
	"crm": { // SelectionId, LeadId, Action, AgentUserId, InvestorUserId
		"attached":          {"SelectionId", "LeadId", "Action", "AgentUserId", "InvestorUserId"},
		"viewed":            {"SelectionId", "LeadId", "Action", "AgentUserId", "InvestorUserId"},
		"skipped-duplicate": {"SelectionId", "LeadId", "Action", "AgentUserId", "InvestorUserId"},
		"parked":            {"SelectionId", "Action", "AgentUserId", "InvestorUserId"}, // skipped-lead-not-found: no lead yet
		"dead-lettered":     {"SelectionId", "Action", "AgentUserId", "InvestorUserId"},
	},
}

// TestOutcomeLinesCarryTheSpecsFields plays the demo scenario — every path
// of the three consumers — with the consumers at the default log level,
// and checks that every outcome line of each service carries the fields its
// spec lists, and that the scenario met every outcome of the table.
func TestOutcomeLinesCarryTheSpecsFields(t *testing.T) {
	url := pgtest.NewDB(t)
	db, err := sql.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	sc := demo.NewScenario(time.Now())
	demotest.Setup(t, sc, db)
	run := demotest.Start(t, demotest.NewCluster(t), url, demotest.Options{})
	run.Play(sc, db, nil)
	run.WaitDone(db)
	if bad := sc.Check(context.Background(), db); len(bad) > 0 {
		t.Fatalf("the scenario did not reach its outcome: %v", bad)
	}
	// The members of each message's payload, by MessageId: a dead letter
	// carries the fields its payload holds (a member missing is why some
	// are dead-lettered).
	members := map[string]map[string]bool{}
	for _, e := range sc.Events() {
		var env struct{ Payload map[string]any }
		if json.Unmarshal(e.Value, &env) == nil {
			m := map[string]bool{}
			for k, v := range env.Payload {
				m[k] = v != nil && v != "" // a member with nothing to log is as good as missing
			}
			members[e.MessageID.String()] = m
		}
	}
	for service, byOutcome := range specFields {
		seen := map[string]int{}
		lines := run.Logs[service].Lines(func(l map[string]any) bool { return l["outcome"] != nil })
		for _, l := range lines {
			outcome := fmt.Sprint(l["outcome"])
			if l["code"] == "EVENT_ENVELOPE_INVALID" || outcome == "skipped-unknown-event-type" {
				continue // no payload to read
			}
			want, ok := byOutcome[outcome]
			if !ok {
				t.Errorf("%s: outcome %q not in the spec's table: %v", service, outcome, l)
				continue
			}
			seen[outcome]++
			if l["MessageId"] == nil {
				t.Errorf("%s %s: no MessageId: %v", service, outcome, l)
			}
			for _, f := range want {
				if outcome == "dead-lettered" && !slices.ContainsFunc(splitOr(f), func(k string) bool {
					return members[fmt.Sprint(l["MessageId"])][strings.TrimPrefix(k, "Event")]
				}) {
					continue // the payload lacks it
				}
				if !slices.ContainsFunc(splitOr(f), func(k string) bool { return l[k] != nil }) {
					t.Errorf("%s %s (%v): no %s: %v", service, outcome, l["code"], f, l)
				}
			}
		}
		for outcome := range byOutcome {
			if seen[outcome] == 0 && outcome != "updated" {
				t.Errorf("%s: the scenario logged no %q line", service, outcome)
			}
		}
	}
}

func splitOr(f string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(f); i++ {
		if i == len(f) || f[i] == '|' {
			out = append(out, f[start:i])
			start = i + 1
		}
	}
	return out
}
