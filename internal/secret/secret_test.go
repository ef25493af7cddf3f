package secret

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// pw has the characters that break a hand-built URL.
const pw = "p%4Ass@w:rd/x"

func TestDSNMasksThePasswordOfEveryForm(t *testing.T) {
	for _, dsn := range []string{
		"postgres://app:p%254Ass%40w%3Ard%2Fx@db:5432/pin?sslmode=verify-full", // percent-encoded, as it should be
		"postgres://app:" + pw + "@db:5432/pin?sslmode=disable",                // as a hand would write it: does not parse
		"postgres://app@db/pin?password=" + pw + "&sslmode=disable",
		"host=db user=app password='" + pw + "' dbname=pin",
		"host=db user=app password=" + pw + " dbname=pin",
	} {
		got := DSN(dsn)
		for _, p := range Passwords(dsn) {
			if p != "" && strings.Contains(got, p) {
				t.Errorf("DSN(%q) = %q: still holds %q", dsn, got, p)
			}
		}
		if strings.Contains(got, "w:rd") || strings.Contains(got, "%3Ard") {
			t.Errorf("DSN(%q) = %q: part of the password remains", dsn, got)
		}
		if !strings.Contains(got, Mask) || !strings.Contains(got, "db") {
			t.Errorf("DSN(%q) = %q: want the host kept and the password masked", dsn, got)
		}
	}
}

func TestRedactorHidesEveryFormOfASecret(t *testing.T) {
	r := FromEnv([]string{
		"DATABASE_URL=postgres://app:p%254Ass%40w%3Ard%2Fx@db/pin",
		"KAFKA_SASL_PASSWORD=kafka-" + pw,
		"KAFKA_SASL_USERNAME=app",
		"LOG_LEVEL=info",
	})
	text := strings.Join([]string{
		pw, "p%254Ass%40w%3Ard%2Fx", "p%254Ass@w:rd%2Fx", "kafka-" + pw, `{"err":"dial: ` + pw + `"}`,
	}, "\n")
	for _, out := range []string{r.Redact(text), write(r, text)} {
		for _, leak := range []string{pw, "Ass@w", "4Ass", "%3Ard", "w:rd"} {
			if strings.Contains(out, leak) {
				t.Fatalf("%q leaks %q", out, leak)
			}
		}
	}
	if got := r.Redact("user app, level info"); got != "user app, level info" {
		t.Fatalf("non-secrets changed: %q", got)
	}
}

func write(r *Redactor, s string) string {
	var b bytes.Buffer
	w := r.Writer(&b)
	for _, line := range strings.SplitAfter(s, "\n") {
		if _, err := w.Write([]byte(line)); err != nil {
			panic(err)
		}
	}
	return b.String()
}

// A password with a quote, a backslash and a tab, as a JSON log line
// (zerolog's, or an error text quoted inside one) escapes it: masked in
// those forms too.
func TestRedactorHidesTheJSONEscapedFormsOfASecret(t *testing.T) {
	const nasty = "q\"b\\t\tu\u2028<&>"
	r := FromEnv([]string{"DATABASE_URL=postgres://app:" + url.PathEscape(nasty) + "@db/pin"})
	var line bytes.Buffer
	log := zerolog.New(&line)
	log.Error().Str("error", "dial: "+nasty).Msg("x")
	quoted, _ := json.Marshal(map[string]string{"error": nasty})
	twice, _ := json.Marshal(map[string]string{"reason": string(quoted)})
	text := line.String() + string(quoted) + "\n" + string(twice) + "\n"
	for _, out := range []string{r.Redact(text), write(r, text)} {
		for _, leak := range []string{"q\"b", `q\"b`, `q\\\"b`, "t\tu", `t\tu`, `\\t\\tu`} {
			if strings.Contains(out, leak) {
				t.Fatalf("%q leaks %q", out, leak)
			}
		}
		if strings.Count(out, Mask) < 3 {
			t.Fatalf("%q: want the secret masked in each of its 3 forms", out)
		}
	}
}
