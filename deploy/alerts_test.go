package deploy

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// ruleFile is the Prometheus rule file format (the fields alerts.yml
// uses; an unknown field fails the decoding).
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadAlerts(t *testing.T) ruleFile { return loadRules(t, "alerts.yml") }

// loadRules decodes a rule file of deploy/prometheus strictly.
func loadRules(t *testing.T, name string) ruleFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("prometheus", name))
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(f.Groups) == 0 {
		t.Fatalf("%s has no groups", name)
	}
	return f
}

// Every alert is well formed and names only metrics, labels and label
// values the code exports.
func TestAlertsNameExportedMetrics(t *testing.T) {
	fams := exported(t)
	f := loadAlerts(t)
	seen := map[string]bool{}
	groups := map[string]bool{}
	for _, g := range f.Groups {
		if g.Name == "" || groups[g.Name] {
			t.Errorf("group name %q empty or repeated", g.Name)
		}
		groups[g.Name] = true
		for _, r := range g.Rules {
			where := "alert " + r.Alert
			if r.Alert == "" || seen[r.Alert] {
				t.Errorf("group %s: alert name %q empty or repeated", g.Name, r.Alert)
			}
			seen[r.Alert] = true
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", where, s)
			}
			for _, a := range []string{"summary", "description", "runbook"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation", where, a)
				}
			}
			if r.For != "" {
				if d, err := time.ParseDuration(r.For); err != nil || d <= 0 {
					t.Errorf("%s: for %q is not a duration", where, r.For)
				}
			}
			checkExpr(t, where, r.Expr, fams)
		}
	}
}

// The alerts of the specs' Observability sections are all there: lag
// > 5 min, DLQ > 0, bursts of MSG_CHAT_NOT_PROVISIONED and of lead not
// found.
func TestAlertsCoverTheSpecs(t *testing.T) {
	f := loadAlerts(t)
	type use struct {
		expr  string
		codes []string
	}
	var uses []use
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			refs, err := parseRefs(r.Expr)
			if err != nil {
				t.Fatal(err)
			}
			u := use{expr: r.Expr}
			for _, s := range refs.selectors {
				for _, m := range s.matchers {
					if m.label == "code" {
						u.codes = append(u.codes, s.metric+"/"+m.value)
					}
				}
			}
			uses = append(uses, u)
		}
	}
	find := func(metric, must string) bool {
		for _, u := range uses {
			if strings.Contains(u.expr, metric) && strings.Contains(u.expr, must) {
				return true
			}
		}
		return false
	}
	for _, want := range []struct{ metric, must, why string }{
		{"messenger_lead_participants_lag_seconds", "> 300", "messenger: lag > 5 min"},
		{"rewards_referral_bonds_lag_seconds", "> 300", "rewards: lag > 5 min"},
		{"crm_selection_shared_lag_seconds", "> 300", "crm: lag > 5 min"},
		{"increase(messenger_lead_participants_dlq_total", "> 0", "messenger: DLQ > 0"},
		{"increase(rewards_referral_bonds_dlq_total", "> 0", "rewards: DLQ > 0"},
		{"increase(crm_selection_shared_dlq_total", "> 0", "crm: DLQ > 0"},
		{"increase(crm_selection_shared_lead_not_found_total", ">", "crm: burst of lead_not_found"},
		{"pin_consumer_paused_partitions", "> 0", "a partition paused for long"},
	} {
		if !find(want.metric, want.must) {
			t.Errorf("no alert for %s (an expression with %s and %q)", want.why, want.metric, want.must)
		}
	}
	burst := slices.ContainsFunc(uses, func(u use) bool {
		return slices.Contains(u.codes, "pin_consumer_parked_total/MSG_CHAT_NOT_PROVISIONED") ||
			slices.Contains(u.codes, "pin_consumer_retries_total/MSG_CHAT_NOT_PROVISIONED")
	})
	if !burst {
		t.Error("no alert for a burst of MSG_CHAT_NOT_PROVISIONED")
	}
}

// With promtool installed: the rules load, and alerts_test.yml's unit
// tests pass.
func TestAlertsPromtool(t *testing.T) {
	runPromtool(t, "prometheus", "check", "rules", "alerts.yml")
	runPromtool(t, "prometheus", "test", "rules", "alerts_test.yml")
}
