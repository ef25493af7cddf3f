package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ X, Y, W, H int } `json:"gridPos"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("grafana", "consumers.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("consumers.json: %v", err)
	}
	if d.UID == "" || d.Title == "" {
		t.Fatal("consumers.json: no uid or title")
	}
	return d
}

// allPanels flattens rows.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

type panelExpr struct{ where, expr string }

func dashboardExprs(t *testing.T, d dashboard) []panelExpr {
	t.Helper()
	var out []panelExpr
	ids := map[int]bool{}
	for _, p := range allPanels(d.Panels) {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24 columns", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Title == "" || len(p.Targets) == 0 {
			t.Errorf("panel %d: no title or no query", p.ID)
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource is not the ${datasource} variable", p.Title)
		}
		for _, q := range p.Targets {
			out = append(out, panelExpr{where: fmt.Sprintf("panel %q query %s", p.Title, q.RefID), expr: q.Expr})
		}
	}
	return out
}

var labelValues = regexp.MustCompile(`^label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// Every query of the dashboard and of its service variable names only
// metrics, labels and label values the code exports, and the dashboard
// shows what the issue asks for.
func TestDashboardNamesExportedMetrics(t *testing.T) {
	fams := exported(t)
	d := loadDashboard(t)
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: %q is not label_values(metric, label)", v.Name, v.Definition)
			continue
		}
		if f := fams[m[1]]; f == nil || !f.labels[m[2]] {
			t.Errorf("variable %s: %s has no label %s", v.Name, m[1], m[2])
		}
	}
	if !vars["service"] || !vars["datasource"] {
		t.Errorf("variables %v, want service and datasource", vars)
	}
	read := map[string]bool{}
	for _, q := range dashboardExprs(t, d) {
		for _, f := range checkExpr(t, q.where, q.expr, fams) {
			read[f] = true
		}
		if strings.Contains(q.expr, "pin_consumer_") && !strings.Contains(q.expr, `service=~"$service"`) {
			t.Errorf("%s: a runtime family not filtered by $service: %s", q.where, q.expr)
		}
	}
	for _, want := range []string{
		"pin_consumer_messages_total", // throughput, outcome mix
		"pin_consumer_lag_messages", "messenger_lead_participants_lag_seconds", "rewards_referral_bonds_lag_seconds", "crm_selection_shared_lag_seconds",
		"pin_consumer_dlq_total", "pin_consumer_retries_total", "pin_consumer_paused_partitions",
		"pin_consumer_in_flight_messages", "pin_consumer_message_duration_seconds",
	} {
		if !read[want] {
			t.Errorf("the dashboard shows no %s", want)
		}
	}
}

// With promtool installed: every query parses as PromQL once Grafana's
// variables are replaced (as recording rules in a scratch rule file).
func TestDashboardPromtool(t *testing.T) {
	promtool(t)
	d := loadDashboard(t)
	r := strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$__interval", "1m", "$service", ".*")
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, q := range dashboardExprs(t, d) {
		expr, err := json.Marshal(r.Replace(q.expr))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "      - record: dashboard:query_%d\n        expr: %s\n", i, expr)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard.yml"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, dir, "check", "rules", "dashboard.yml")
}
