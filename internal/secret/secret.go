// Package secret keeps passwords out of what the consumers and pinctl
// print: DSN hides the password of a database URL or key=value string for
// messages, and a Redactor replaces known secret values (in every form they
// may take) in any text or stream — the last guard in front of stderr, the
// DLQ's x-dlq-reason and span statuses.
package secret

import (
	"bytes"
	"encoding/json"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Mask is what a secret is replaced with.
const Mask = "xxxxx"

var (
	// userinfo of a URL: scheme://user:password@ (the password up to the
	// last @ before the host, as net/url reads it).
	urlPassword = regexp.MustCompile(`(?i)^([a-z][a-z0-9+.-]*://[^:/@]*:)(.*)@([^@]*)$`)
	// password=… in a query string or a key=value string, quoted or not.
	kvPassword = regexp.MustCompile(`(?i)(^|[\s&?;])(password|sslpassword)=('(?:[^'\\]|\\.)*'|[^\s&;]*)`)
)

// DSN returns dsn, a database URL or a lib/pq key=value string, with its
// passwords masked, whether or not it parses.
func DSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		s := u.Redacted()
		if q := u.Query(); q.Has("password") || q.Has("sslpassword") {
			s = kvPassword.ReplaceAllString(s, "${1}${2}="+Mask)
		}
		return s
	}
	s := urlPassword.ReplaceAllString(dsn, "${1}"+Mask+"@${3}")
	return kvPassword.ReplaceAllString(s, "${1}${2}="+Mask)
}

// Passwords returns the passwords dsn holds (in its userinfo, a password=
// parameter or key), as given and decoded: what a Redactor must hide.
func Passwords(dsn string) []string {
	var out []string
	if m := urlPassword.FindStringSubmatch(dsn); m != nil {
		out = append(out, m[2])
		if p, err := url.PathUnescape(m[2]); err == nil {
			out = append(out, p)
		}
	}
	for _, m := range kvPassword.FindAllStringSubmatch(dsn, -1) {
		v := strings.Trim(m[3], "'")
		out = append(out, v, strings.ReplaceAll(v, `\'`, `'`))
		if p, err := url.QueryUnescape(v); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// KafkaProperty reports a librdkafka property whose value is a secret
// (sasl.password, ssl.key.password, ssl.keystore.password, ssl.key.pem,
// sasl.oauthbearer.client.secret, sasl.oauthbearer.config, …).
func KafkaProperty(prop string) bool {
	p := strings.ToLower(prop)
	return strings.Contains(p, "password") || strings.Contains(p, "secret") ||
		strings.HasSuffix(p, "key.pem") || strings.Contains(p, "oauthbearer.config") || strings.Contains(p, "jaas")
}

// A Redactor replaces known secret values in text. The zero value hides
// nothing.
type Redactor struct {
	olds []string // longest first, so that a secret inside another goes with it
}

// New returns a Redactor of secrets (empty ones are ignored).
func New(secrets ...string) *Redactor {
	r := &Redactor{}
	r.Add(secrets...)
	return r
}

// FromEnv returns a Redactor of the secrets of an environment ("NAME=value"
// pairs): the passwords of DATABASE_URL and of any *_URL variable, and the
// values of the KAFKA_* variables whose property is secret.
func FromEnv(environ []string) *Redactor {
	r := &Redactor{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok || v == "":
		case k == "DATABASE_URL" || strings.HasSuffix(k, "_URL"):
			r.Add(Passwords(v)...)
		case strings.HasPrefix(k, "KAFKA_") && KafkaProperty(strings.ReplaceAll(strings.TrimPrefix(k, "KAFKA_"), "_", ".")):
			r.Add(v)
		}
	}
	return r
}

// Add hides more secrets: each as it is and in the forms URL and JSON
// encoding give it — a password with a quote, a backslash or a tab is
// escaped in a JSON log line (zerolog's or encoding/json's), once or, in
// a JSON text quoted inside another, twice.
func (r *Redactor) Add(secrets ...string) {
	add := func(f string) {
		if f != "" && !slices.Contains(r.olds, f) {
			r.olds = append(r.olds, f)
		}
	}
	for _, s := range secrets {
		if s == "" {
			continue
		}
		for _, f := range []string{s, url.QueryEscape(s), url.PathEscape(s), (&url.URL{User: url.UserPassword("u", s)}).String()[len("//u:"):]} {
			f = strings.TrimSuffix(f, "@")
			add(f)
			for _, once := range jsonEscapes(f) {
				add(once)
				for _, twice := range jsonEscapes(once) {
					add(twice)
				}
			}
		}
	}
	slices.SortFunc(r.olds, func(a, b string) int { return len(b) - len(a) })
}

// jsonEscapes returns the forms s takes inside a JSON string: encoding/json's
// (with and without HTML escaping) and zerolog's (which leaves U+2028 and
// U+2029 as they are). Only the forms that differ from s.
func jsonEscapes(s string) []string {
	var out []string
	for _, html := range []bool{true, false} {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(html)
		if err := enc.Encode(s); err != nil {
			continue
		}
		e := strings.TrimSuffix(b.String(), "\n")
		e = strings.TrimSuffix(strings.TrimPrefix(e, `"`), `"`)
		out = append(out, e, strings.NewReplacer(`\u2028`, "\u2028", `\u2029`, "\u2029").Replace(e))
	}
	var diff []string
	for _, e := range out {
		if e != s && !slices.Contains(diff, e) {
			diff = append(diff, e)
		}
	}
	return diff
}

// Redact returns s with every secret masked.
func (r *Redactor) Redact(s string) string {
	if r == nil {
		return s
	}
	for _, old := range r.olds {
		s = strings.ReplaceAll(s, old, Mask)
	}
	return s
}

// Writer returns w behind the Redactor: each Write is masked before it is
// passed on. Writers of whole lines (zerolog, fmt.Fprintln) never split a
// secret across two writes.
func (r *Redactor) Writer(w io.Writer) io.Writer { return &writer{r: r, w: w} }

type writer struct {
	r *Redactor
	w io.Writer
}

func (w *writer) Write(p []byte) (int, error) {
	out := p
	for _, old := range w.r.olds {
		if bytes.Contains(out, []byte(old)) {
			out = bytes.ReplaceAll(out, []byte(old), []byte(Mask))
		}
	}
	if _, err := w.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}
