package deploy

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/roster"
)

// documentedEnv are the variables of the environment tables that are not
// consumer.Config's: librdkafka's and OpenTelemetry's families and the Go
// runtime's own (goRuntimeEnv).
var documentedEnv = append([]string{"KAFKA_<PROPERTY>", "OTEL_*"}, goRuntimeEnv...)

// declaredEnv is every variable a consumer binary reads by name, with its
// default as the tables write it: consumer.Config's (consumer.ConfigVars),
// then each roster service's periodic gauges' (PeriodicGauge.IntervalVar,
// which Main reads).
func declaredEnv(t *testing.T) []consumer.ConfigVar {
	t.Helper()
	vars := consumer.ConfigVars()
	for _, s := range roster.All {
		for _, g := range s.New(prometheus.NewRegistry()).Gauges {
			if g.IntervalVar != "" {
				vars = append(vars, consumer.ConfigVar{Name: g.IntervalVar, Default: shortDuration(g.Interval)})
			}
		}
	}
	if len(vars) < 10 || !slices.ContainsFunc(vars, func(v consumer.ConfigVar) bool { return v.Name == "DATABASE_URL" }) {
		t.Fatalf("consumer.ConfigVars lists %v: the declaration is not read", vars)
	}
	return vars
}

// shortDuration writes d as the docs do: 1m, not 1m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

var envTableName = regexp.MustCompile("`([A-Z][A-Z0-9_]*(?:<PROPERTY>|\\*)?)`")

// envTable reads the "| variable | meaning | default |" table of a
// markdown file: the default column of each variable its first column
// names.
func envTable(t *testing.T, text string) map[string]string {
	t.Helper()
	rows := map[string]string{}
	in := false
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "| variable | meaning | default |"):
			in = true
		case in && strings.HasPrefix(line, "|---"):
		case in && strings.HasPrefix(line, "|"):
			cells := strings.Split(strings.Trim(line, "|"), "|")
			if len(cells) != 3 {
				t.Fatalf("an environment row of %d cells, want 3: %s", len(cells), line)
			}
			for _, m := range envTableName.FindAllStringSubmatch(cells[0], -1) {
				rows[m[1]] = strings.TrimSpace(cells[2])
			}
		case in:
			return rows
		}
	}
	return rows
}

// TestEnvironmentTablesAreTheDeclaration checks that README.md's and
// docs/operations.md's environment tables list exactly the variables the
// binaries declare (and the documented families), with their defaults.
func TestEnvironmentTablesAreTheDeclaration(t *testing.T) {
	var httpDefault []string
	for _, s := range roster.All {
		httpDefault = append(httpDefault, fmt.Sprintf("`%s` %s", s.Addr(), s.Name()))
	}
	for _, file := range []string{"README.md", filepath.Join("docs", "operations.md")} {
		rows := envTable(t, readFile(t, filepath.Join("..", file)))
		if len(rows) == 0 {
			t.Errorf("%s: no | variable | meaning | default | table", file)
			continue
		}
		for _, v := range declaredEnv(t) {
			got, ok := rows[v.Name]
			want := "`" + v.Default + "`"
			switch v.Default {
			case "required":
				want = "required"
			case "": // the service's
				want = strings.Join(httpDefault, ", ")
			}
			switch {
			case !ok:
				t.Errorf("%s: the environment table has no %s (default %s)", file, v.Name, want)
			case got != want:
				t.Errorf("%s: %s's default is %s, the table says %s", file, v.Name, want, got)
			}
			delete(rows, v.Name)
		}
		for _, name := range documentedEnv {
			if _, ok := rows[name]; !ok {
				t.Errorf("%s: the environment table has no %s", file, name)
			}
			delete(rows, name)
		}
		for name := range rows {
			t.Errorf("%s: the environment table lists %s, which no consumer reads", file, name)
		}
	}
}
