// Package reconcile is the replica's half of rewards' reconciliation with
// the referral service (docs/specs/rewards.md, Observability): the logic of
// `pinctl rewards reconcile`. It compares the replica's count of Active
// bonds (rewards.CountActive, the count the consumer exports as
// rewards_bond_replicas) with the referral service's — a number given, or
// read from a URL: a referral endpoint answering a bare number or a
// Prometheus instant query — and, given the referral side's Active bond
// ids, lists those the replica lacks or holds in another status. On a
// mismatch it prints the runbook's replay from offset 0.
package reconcile

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/pin-platform/pin/consumers/rewards"
	"github.com/pin-platform/pin/internal/term"
)

// Replay is the runbook's replay of the topic from offset 0
// (docs/operations.md, "Re-sync a replica from offset 0"), one step a line.
var Replay = []string{
	"stop every rewards consumer (all instances: the group must have no members)",
	"bin/pinctl group reset --group " + rewards.Group + " --topic " + rewards.Topic + " --to-earliest",
	"start the rewards consumers: they read the topic from offset 0 and the replica converges",
}

// Options are the arguments of Run: `pinctl rewards reconcile`'s.
type Options struct {
	DB *sql.DB // the rewards database

	// The referral side's count of Active bonds: Expect when ExpectSet,
	// else read from ExpectFrom (a URL) with HTTP, else the number of ids
	// of Listed.
	Expect     int64
	ExpectSet  bool
	ExpectFrom string
	HTTP       *http.Client // nil: http.DefaultClient (give it a timeout)

	// Listed, when not nil, is the referral side's Active bond ids, one a
	// line: each the replica lacks or holds in another status is printed.
	// It is read as a stream, Chunk ids at a time (0: 1000).
	Listed io.Reader
	Chunk  int

	// Timeout bounds each database statement (0: none): a long list is
	// checked in as many statements as it takes, each within it.
	Timeout time.Duration
}

// step is ctx bounded by o.Timeout, for one statement.
func (o Options) step(ctx context.Context) (context.Context, context.CancelFunc) {
	if o.Timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, o.Timeout)
}

// Result is what Run found.
type Result struct {
	Replica, Referral int64
	Listed            int // ids read from Options.Listed
	Missing           int // of them, absent from the replica or not Active there
}

// Mismatch reports whether the two sides differ: in their counts, or by a
// listed bond the replica does not hold Active.
func (r Result) Mismatch() bool { return r.Replica != r.Referral || r.Missing > 0 }

// Run counts the replica's Active bonds, gets the referral side's count,
// lists the missing bonds when Listed is given, and prints both counts, the
// difference and, on a mismatch, the replay commands on out. The error is
// for a count that could not be had (the database, the URL, the file); a
// mismatch is no error: Result says it.
func Run(ctx context.Context, o Options, out io.Writer) (Result, error) {
	var r Result
	var err error
	cctx, cancel := o.step(ctx)
	r.Replica, err = rewards.CountActive(cctx, o.DB)
	cancel()
	if err != nil {
		return r, fmt.Errorf("count the replica's Active bonds: %w", err)
	}
	source := ""
	switch {
	case o.ExpectSet:
		r.Referral, source = o.Expect, "--expect-active"
	case o.ExpectFrom != "":
		if r.Referral, err = Fetch(ctx, o.HTTP, o.ExpectFrom); err != nil {
			return r, err
		}
		source = redactURL(o.ExpectFrom)
	}
	if o.Listed != nil {
		if r.Listed, r.Missing, err = ListMissing(ctx, o.DB, o.Listed, o.Chunk, o.Timeout, out); err != nil {
			return r, err
		}
		if source == "" {
			r.Referral, source = int64(r.Listed), "the ids listed"
		}
	}
	if source == "" {
		return r, errors.New("no referral count: give a number, a URL or a list of ids")
	}
	fmt.Fprintf(out, "replica:  %d Active bond(s) in referral_bond_replicas\n", r.Replica)
	fmt.Fprintf(out, "referral: %d Active bond(s) (%s)\n", r.Referral, source)
	fmt.Fprintf(out, "difference (replica − referral): %+d\n", r.Replica-r.Referral)
	if o.Listed != nil {
		fmt.Fprintf(out, "listed:   %d id(s), %d of them not Active in the replica\n", r.Listed, r.Missing)
	}
	if !r.Mismatch() {
		fmt.Fprintln(out, "match")
		return r, nil
	}
	fmt.Fprintln(out, "mismatch: if it persists while no message waits (counts taken at different moments differ by what is in flight), replay the topic from offset 0 (docs/operations.md, \"Reconciling with referral\"):")
	for i, step := range Replay {
		fmt.Fprintf(out, "  %d. %s\n", i+1, step)
	}
	return r, nil
}

// maxBody bounds what Fetch reads of an answer.
const maxBody = 1 << 20

// Fetch reads a count from url (GET): a body that is a bare number, or a
// Prometheus /api/v1/query answer holding one sample (a vector of one
// series, or a scalar).
func Fetch(ctx context.Context, client *http.Client, rawURL string) (int64, error) {
	if client == nil {
		client = http.DefaultClient
	}
	where := redactURL(rawURL)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return 0, fmt.Errorf("--expect-active-from %s: %w", where, errors.Unwrap(err))
	}
	req.Header.Set("Accept", "application/json, text/plain")
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text repeats the URL, password included
		}
		return 0, fmt.Errorf("--expect-active-from %s: %w", where, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return 0, fmt.Errorf("--expect-active-from %s: %w", where, err)
	}
	if resp.StatusCode/100 != 2 {
		return 0, fmt.Errorf("--expect-active-from %s: %s: %s", where, resp.Status, term.Printable(firstLine(body)))
	}
	n, err := ParseCount(body)
	if err != nil {
		return 0, fmt.Errorf("--expect-active-from %s: %w", where, err)
	}
	return n, nil
}

// ParseCount reads a count from an answer: a bare number, or a Prometheus
// instant query's JSON with exactly one sample.
func ParseCount(body []byte) (int64, error) {
	s := strings.TrimSpace(string(body))
	if !strings.HasPrefix(s, "{") {
		return count(s)
	}
	var q struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &q); err != nil {
		return 0, fmt.Errorf("neither a number nor a Prometheus answer: %w", err)
	}
	if q.Status != "success" {
		return 0, fmt.Errorf("the Prometheus query answered %s: %s", term.Printable(q.Status), term.Printable(q.Error))
	}
	var sample [2]any // [time, "value"]
	switch q.Data.ResultType {
	case "vector":
		var v []struct {
			Value [2]any `json:"value"`
		}
		if err := json.Unmarshal(q.Data.Result, &v); err != nil {
			return 0, fmt.Errorf("the Prometheus vector: %w", err)
		}
		if len(v) != 1 {
			return 0, fmt.Errorf("the Prometheus query returned %d series, want 1 (aggregate it: sum(…))", len(v))
		}
		sample = v[0].Value
	case "scalar":
		if err := json.Unmarshal(q.Data.Result, &sample); err != nil {
			return 0, fmt.Errorf("the Prometheus scalar: %w", err)
		}
	default:
		return 0, fmt.Errorf("the Prometheus query returned a %s, want a vector of one series", term.Printable(q.Data.ResultType))
	}
	v, ok := sample[1].(string)
	if !ok {
		return 0, errors.New("the Prometheus sample has no value")
	}
	return count(v)
}

// count parses a whole, non-negative number ("1234", "1234.0", "1.234e3").
func count(s string) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
		return n, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f != math.Trunc(f) || f > math.MaxInt64/2 {
		return 0, fmt.Errorf("%s is not a count", strconv.Quote(term.Printable(firstLine([]byte(s)))))
	}
	return int64(f), nil
}

// ListMissing reads bond ids from ids (one a line; blank lines and lines
// starting with # are skipped) chunk at a time, looks each chunk up in one
// statement, and prints, in the order read, each id the replica does not
// hold Active: "<id>\tabsent" or "<id>\t<its status>". Each statement
// runs within timeout (0: no bound of its own). It returns how many ids it
// read and how many it printed.
func ListMissing(ctx context.Context, db *sql.DB, ids io.Reader, chunk int, timeout time.Duration, out io.Writer) (listed, missing int, err error) {
	if chunk <= 0 {
		chunk = 1000
	}
	step := Options{Timeout: timeout}.step
	batch := make([]string, 0, chunk)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		status := make(map[string]string, len(batch))
		qctx, cancel := step(ctx)
		defer cancel()
		rows, err := db.QueryContext(qctx, `SELECT bond_id::text, status FROM referral_bond_replicas WHERE bond_id = ANY($1::uuid[])`, pq.Array(batch))
		if err != nil {
			return fmt.Errorf("look the bonds up: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var id, st string
			if err := rows.Scan(&id, &st); err != nil {
				return err
			}
			status[id] = st
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("look the bonds up: %w", err)
		}
		for _, id := range batch {
			st, held := status[id]
			switch {
			case !held:
				fmt.Fprintf(out, "%s\tabsent\n", id)
			case st != string(rewards.StatusActive):
				fmt.Fprintf(out, "%s\t%s\n", id, term.Printable(st))
			default:
				continue
			}
			missing++
		}
		batch = batch[:0]
		return nil
	}
	sc := bufio.NewScanner(ids)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		id, err := uuid.Parse(s)
		if err != nil {
			return listed, missing, fmt.Errorf("--list-missing: line %d: %s is not a bond id (a UUID)", line, strconv.Quote(term.Printable(cut(s, 80))))
		}
		listed++
		batch = append(batch, id.String())
		if len(batch) == chunk {
			if err := flush(); err != nil {
				return listed, missing, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return listed, missing, fmt.Errorf("--list-missing: line %d: %w", line+1, err)
	}
	return listed, missing, flush()
}

// redactURL is u without its password, for output.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(a URL that does not parse)"
	}
	return term.Printable(p.Redacted())
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return cut(s, 200)
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
