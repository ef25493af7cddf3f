package deploy

import (
	"strings"
	"testing"
)

// referralSeries is the series the reconciliation template reads from the
// referral side: the operator's recording rule makes it (reconcile.yml's
// header), no consumer exports it.
const referralSeries = "pin:referral_active_bonds"

// The reconciliation template (deploy/prometheus/reconcile.yml) is a rule
// file like alerts.yml: well formed, every alert with a severity, a
// summary, a description and a runbook, naming only what rewards exports
// and the operator's referral series; it compares the two.
func TestReconcileTemplate(t *testing.T) {
	f := loadRules(t, "reconcile.yml")
	fams := exported(t)
	fams[referralSeries] = &family{name: referralSeries, labels: map[string]bool{}}
	compares := false
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			where := "reconcile.yml alert " + r.Alert
			if r.Alert == "" || r.Labels["severity"] == "" || r.Labels["service"] != "rewards" {
				t.Errorf("%s: needs a name, a severity and service rewards (%v)", where, r.Labels)
			}
			for _, a := range []string{"summary", "description", "runbook"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation", where, a)
				}
			}
			read := checkExpr(t, where, r.Expr, fams)
			if containsAll(read, "rewards_bond_replicas", referralSeries) {
				compares = true
			}
		}
	}
	if !compares {
		t.Errorf("no alert of reconcile.yml compares rewards_bond_replicas with %s", referralSeries)
	}
	runPromtool(t, "prometheus", "check", "rules", "reconcile.yml")
	runPromtool(t, "prometheus", "test", "rules", "reconcile_test.yml")
}

func containsAll(have []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}
