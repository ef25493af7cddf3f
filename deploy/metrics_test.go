package deploy

import (
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	_ "github.com/lib/pq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/roster"
	"github.com/pin-platform/pin/ent"
)

// family is a metric family the code exports.
type family struct {
	name   string
	labels map[string]bool // constant and variable label names
	// typ is the family's type when it has series without traffic; a
	// vector (…Vec) has none until it is first used: typ is then unset.
	typ *dto.MetricType
}

// services are the builders of the three consumers, as their main
// packages pass them to consumer.Main.
var services = func() map[string]func(prometheus.Registerer) consumer.Service {
	m := map[string]func(prometheus.Registerer) consumer.Service{}
	for _, s := range roster.All {
		m[s.Name()] = s.New
	}
	return m
}()

// exported returns every family the three consumer processes export, by
// name: each service is built on a fresh registry holding what
// consumer.Main registers (Go and process collectors), and its runtime is
// created on it (which registers the runtime's families and the service's
// spec-named ones). Names and labels come from the registry's descriptors,
// so vectors without series count too; types from a Gather.
func exported(t *testing.T) map[string]*family {
	t.Helper()
	// Nothing listens there: the rewards lag gauge's query fails at once
	// and the gauge reads 0.
	db, err := sql.Open("postgres", "postgres://pin@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db)))

	out := map[string]*family{}
	for name, build := range services {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		svc := build(reg)
		if svc.Name != name {
			t.Fatalf("service %q builds a service named %q", name, svc.Name)
		}
		cfg := consumer.Config{Brokers: "127.0.0.1:1", DatabaseURL: "postgres://127.0.0.1:1/none", RetryTimeScale: 1}
		if _, err := consumer.New(cfg, svc, client, db, consumer.Options{Registry: reg, Logger: zerolog.Nop()}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		descs := make(chan *prometheus.Desc)
		go func() { reg.Describe(descs); close(descs) }()
		for d := range descs {
			fqName, labels, err := parseDesc(d.String())
			if err != nil {
				t.Fatal(err)
			}
			f := out[fqName]
			if f == nil {
				f = &family{name: fqName, labels: map[string]bool{}}
				out[fqName] = f
			}
			for _, l := range labels {
				f.labels[l] = true
			}
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatalf("%s: gather: %v", name, err)
		}
		for _, mf := range mfs {
			if f := out[mf.GetName()]; f != nil {
				f.typ = mf.Type
			}
		}
	}
	// Series Prometheus itself adds to every scrape.
	out["up"] = &family{name: "up", labels: map[string]bool{}, typ: dto.MetricType_GAUGE.Enum()}
	return out
}

// descPattern is client_golang's Desc.String() format.
var descPattern = regexp.MustCompile(`^Desc\{fqName: "([a-zA-Z_:][a-zA-Z0-9_:]*)", help: ".*", unit: "[^"]*", constLabels: \{(.*)\}, variableLabels: \{([^}]*)\}\}$`)

// parseDesc reads a family's name and label names from a descriptor. The
// client library exposes them only through Desc.String().
func parseDesc(s string) (name string, labels []string, err error) {
	m := descPattern.FindStringSubmatch(s)
	if m == nil {
		return "", nil, fmt.Errorf("cannot read the descriptor %s: has client_golang's Desc.String() format changed? update descPattern", s)
	}
	for _, c := range regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`).FindAllStringSubmatch(m[2], -1) {
		labels = append(labels, c[1])
	}
	for _, v := range strings.Split(m[3], ",") {
		if v = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(v), "c("), ")"); v != "" {
			labels = append(labels, v)
		}
	}
	return m[1], labels, nil
}

// matcher is one label matcher of a selector.
type matcher struct{ label, op, value string }

// selector is a metric named in an expression, with its matchers.
type selector struct {
	metric   string
	matchers []matcher
}

// exprRefs is what an expression names: metrics and the labels of its
// grouping clauses (by, without, on, ignoring, group_left, group_right).
type exprRefs struct {
	selectors []selector
	grouping  []string
	created   []string // labels label_replace creates
}

var (
	aggregators = map[string]bool{"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true,
		"stdvar": true, "count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
		"limitk": true, "limit_ratio": true}
	groupingWords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
	otherWords    = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
		"inf": true, "nan": true, "Inf": true, "NaN": true}
	labelReplace = regexp.MustCompile(`label_(?:replace|join)\s*\([^"]*"([a-zA-Z_][a-zA-Z0-9_]*)"`)
)

// parseRefs lexes a PromQL expression (with Grafana's $variables) enough to
// find every metric name, its matchers and the grouping labels: strings,
// numbers, range brackets and $variables are skipped; an identifier
// followed by "(" is a function; keywords and aggregators are not metrics.
func parseRefs(expr string) (exprRefs, error) {
	var r exprRefs
	for _, m := range labelReplace.FindAllStringSubmatch(expr, -1) {
		r.created = append(r.created, m[1])
	}
	s := []rune(expr)
	i := 0
	skipSpace := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
			i++
		}
	}
	isIdentStart := func(c rune) bool { return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }
	isIdent := func(c rune) bool { return isIdentStart(c) || (c >= '0' && c <= '9') }
	ident := func() string {
		j := i
		for i < len(s) && isIdent(s[i]) {
			i++
		}
		return string(s[j:i])
	}
	str := func() (string, error) {
		q := s[i]
		i++
		var b strings.Builder
		for i < len(s) && s[i] != q {
			if s[i] == '\\' && q != '`' && i+1 < len(s) {
				i++
			}
			b.WriteRune(s[i])
			i++
		}
		if i >= len(s) {
			return "", fmt.Errorf("unterminated string in %q", expr)
		}
		i++
		return b.String(), nil
	}
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '"' || c == '\'' || c == '`':
			if _, err := str(); err != nil {
				return r, err
			}
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '[':
			j := strings.IndexRune(string(s[i:]), ']')
			if j < 0 {
				return r, fmt.Errorf("unterminated range in %q", expr)
			}
			i += len([]rune(string(s[i:])[:j])) + 1
		case c == '$':
			i++
			if i < len(s) && s[i] == '{' {
				for i < len(s) && s[i] != '}' {
					i++
				}
				i++
			} else {
				ident()
			}
		case c >= '0' && c <= '9' || (c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9'):
			for i < len(s) && (isIdent(s[i]) || s[i] == '.' || ((s[i] == '+' || s[i] == '-') && (s[i-1] == 'e' || s[i-1] == 'E'))) {
				i++
			}
		case c == '{':
			return r, fmt.Errorf("a selector without a metric name in %q", expr)
		case isIdentStart(c):
			word := ident()
			skipSpace()
			next := rune(0)
			if i < len(s) {
				next = s[i]
			}
			switch {
			case groupingWords[word]:
				if next == '(' {
					j := strings.IndexRune(string(s[i:]), ')')
					if j < 0 {
						return r, fmt.Errorf("unterminated label list in %q", expr)
					}
					list := string(s[i:])[1:j]
					i += len([]rune(string(s[i:])[:j])) + 1
					for _, l := range strings.Split(list, ",") {
						if l = strings.TrimSpace(l); l != "" {
							r.grouping = append(r.grouping, l)
						}
					}
				}
			case otherWords[word] || aggregators[word] || next == '(':
				// a keyword, an aggregation or a function call
			default:
				sel := selector{metric: word}
				if next == '{' {
					i++
					for {
						skipSpace()
						if i >= len(s) {
							return r, fmt.Errorf("unterminated selector in %q", expr)
						}
						if s[i] == '}' {
							i++
							break
						}
						if s[i] == ',' {
							i++
							continue
						}
						label := ident()
						skipSpace()
						j := i
						for i < len(s) && strings.ContainsRune("=!~", s[i]) {
							i++
						}
						op := string(s[j:i])
						skipSpace()
						if label == "" || op == "" || i >= len(s) || !strings.ContainsRune("\"'`", s[i]) {
							return r, fmt.Errorf("cannot read the matchers of %s in %q", word, expr)
						}
						v, err := str()
						if err != nil {
							return r, err
						}
						sel.matchers = append(sel.matchers, matcher{label: label, op: op, value: v})
					}
				}
				r.selectors = append(r.selectors, sel)
			}
		default:
			i++
		}
	}
	return r, nil
}

// knownValues are, per label, the values the code gives it: equality
// matchers on these labels must use one of them.
func knownValues() map[string][]string {
	var svcs []string
	for name := range services {
		svcs = append(svcs, name)
	}
	codes := []string{consumer.EnvelopeInvalid.Name, consumer.ProcessingFailed.Name}
	for _, s := range roster.All {
		for _, c := range s.New(prometheus.NewRegistry()).Codes {
			codes = append(codes, c.Name)
		}
	}
	var classes []string
	for _, c := range []consumer.Class{consumer.Invalid, consumer.RetryNow, consumer.RetryLater, consumer.Infrastructure} {
		classes = append(classes, c.String())
	}
	return map[string][]string{"service": svcs, "code": codes, "class": classes}
}

// scrapeLabels are added by Prometheus to every series it scrapes (job,
// instance), and in Kubernetes by the Prometheus Operator's PodMonitor or
// the pod service discovery's usual relabelling (namespace).
var scrapeLabels = map[string]bool{"job": true, "instance": true, "namespace": true}

// checkExpr reports every metric or label expr names that the code does not
// export, and every equality matcher on a known label whose value the code
// never uses. It returns the metric families expr reads.
func checkExpr(t *testing.T, where, expr string, fams map[string]*family) []string {
	t.Helper()
	refs, err := parseRefs(expr)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return nil
	}
	if len(refs.selectors) == 0 {
		t.Errorf("%s: no metric in %q", where, expr)
	}
	values := knownValues()
	available := map[string]bool{}
	for l := range scrapeLabels {
		available[l] = true
	}
	for _, l := range refs.created {
		available[l] = true
	}
	var read []string
	for _, sel := range refs.selectors {
		f, suffix := resolve(sel.metric, fams)
		if f == nil {
			t.Errorf("%s: metric %s is not exported by any service", where, sel.metric)
			continue
		}
		read = append(read, f.name)
		labels := map[string]bool{}
		for l := range f.labels {
			labels[l] = true
		}
		for l := range scrapeLabels {
			labels[l] = true
		}
		if suffix == "_bucket" {
			labels["le"] = true
		}
		for l := range labels {
			available[l] = true
		}
		for _, m := range sel.matchers {
			if !labels[m.label] {
				t.Errorf("%s: %s has no label %q (it has %v)", where, sel.metric, m.label, keys(f.labels))
				continue
			}
			if known, ok := values[m.label]; ok && m.op == "=" && !slices.Contains(known, m.value) {
				t.Errorf("%s: %s{%s=%q}: the code never uses this value (it uses %v)", where, sel.metric, m.label, m.value, known)
			}
		}
	}
	for _, l := range refs.grouping {
		if !available[l] {
			t.Errorf("%s: grouping label %q is on none of the metrics of %q", where, l, expr)
		}
	}
	return read
}

// resolve finds the family of a series name: the family itself, or a
// histogram's _bucket/_sum/_count series. A family whose type is unknown (a
// vector without series) accepts the suffixes too unless it is named like a
// counter.
func resolve(name string, fams map[string]*family) (*family, string) {
	if f := fams[name]; f != nil {
		return f, ""
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		f := fams[base]
		if f == nil {
			continue
		}
		if f.typ == nil {
			// An untyped vector named …_total is a counter by convention.
			if !strings.HasSuffix(base, "_total") {
				return f, suffix
			}
			continue
		}
		if *f.typ == dto.MetricType_HISTOGRAM || (*f.typ == dto.MetricType_SUMMARY && suffix != "_bucket") {
			return f, suffix
		}
	}
	return nil, ""
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// promtool returns the path of promtool, or skips the test when it is not
// installed — and fails it with CI=true: .ci/run installs it (Debian's
// prometheus package).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool is not on PATH and CI=true: install Debian's prometheus package (.ci/run does)")
		}
		t.Skip("promtool is not on PATH")
	}
	return p
}

func runPromtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
}

func TestParseRefs(t *testing.T) {
	expr := `histogram_quantile(0.99, sum by (service, le) (rate(pin_consumer_message_duration_seconds_bucket{service=~"$service"}[$__rate_interval])))
		and on () label_replace(max(x_lag_seconds), "service", "crm", "", "") > 3e2 # comment name_in_comment
		or sum without (code) (increase(y_total{code="A", class!='b'}[15m] offset 5m)) / ${var}`
	r, err := parseRefs(expr)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range r.selectors {
		names = append(names, s.metric)
	}
	if got := strings.Join(names, " "); got != "pin_consumer_message_duration_seconds_bucket x_lag_seconds y_total" {
		t.Errorf("metrics %q", got)
	}
	if got := strings.Join(r.grouping, " "); got != "service le code" {
		t.Errorf("grouping %q", got)
	}
	if got := fmt.Sprint(r.selectors[2].matchers); got != "[{code = A} {class != b}]" {
		t.Errorf("matchers %s", got)
	}
	if got := strings.Join(r.created, " "); got != "service" {
		t.Errorf("created %q", got)
	}
	for _, bad := range []string{`{__name__="x"}`, `x{a=}`, `x{a="b"`, `rate(x[5m)`} {
		if _, err := parseRefs(bad); err == nil {
			t.Errorf("parseRefs(%q) accepted", bad)
		}
	}
}

func TestExportedFamilies(t *testing.T) {
	fams := exported(t)
	// A few the alerts and the dashboard rest on, with their labels.
	for name, labels := range map[string][]string{
		"pin_consumer_messages_total":               {"service", "event_type", "outcome"},
		"pin_consumer_dlq_total":                    {"service", "code"},
		"pin_consumer_retries_total":                {"service", "class", "code"},
		"pin_consumer_lag_messages":                 {"service", "topic", "partition"},
		"crm_selection_shared_dlq_total":            {"code"},
		"crm_selection_shared_lead_not_found_total": nil,
		"messenger_lead_participants_lag_seconds":   nil,
		"rewards_referral_bonds_lag_seconds":        nil,
	} {
		f := fams[name]
		if f == nil {
			t.Errorf("%s is not exported", name)
			continue
		}
		for _, l := range labels {
			if !f.labels[l] {
				t.Errorf("%s has no label %s (it has %v)", name, l, keys(f.labels))
			}
		}
	}
	if f := fams["pin_consumer_batch_size"]; f == nil || f.typ == nil || *f.typ != dto.MetricType_HISTOGRAM {
		t.Errorf("pin_consumer_batch_size is not a histogram with series")
	}
	if _, err := os.Stat(filepath.Join("prometheus", "alerts.yml")); err != nil {
		t.Fatal(err)
	}
}
