package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pin-platform/pin/migrate/localpg"
)

// --profile: profiles of each consumer's max run. The consumer serves
// net/http/pprof (CONSUMER_PPROF=true); its CPU profile starts at the
// partitions' assignment and its heap allocations are taken at the max
// run's end. PostgreSQL runs with pg_stat_statements, reset at the
// assignment and read at the end.

// maxProfileSeconds bounds --profile-seconds.
const maxProfileSeconds = 30

// topStatements are written to <service>-statements.txt; the table
// prints the first printStatements of them.
const (
	topStatements   = 20
	printStatements = 8
)

// pgStatStatements are the server settings of --profile.
var pgStatStatements = []string{"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=all"}

// checkPgStatStatements fails when the server's modules lack
// pg_stat_statements, which --profile preloads.
func checkPgStatStatements() error {
	dir, err := localpg.LibDir()
	if err != nil {
		return err
	}
	so := filepath.Join(dir, "pg_stat_statements.so")
	if _, err := os.Stat(so); err != nil {
		return fmt.Errorf("--profile needs PostgreSQL's pg_stat_statements module, and %s is missing (it comes with the server's contrib modules, e.g. Debian's postgresql or postgresql-contrib package)", so)
	}
	return nil
}

// profileReport is what --profile took of one consumer's max run.
type profileReport struct {
	cpu        *cpuProfile
	allocsBase string // heap allocations at the assignment: -diff_base of allocsPath
	allocsPath string
	cpuTop     string   // go tool pprof -top of the CPU profile ("" without go on $PATH)
	notes      []string // what went wrong or does not fit, said below the table
	stmtPath   string
	stmts      []stmtStat // the top ones by total execution time
	all        stmtStat   // the sum over the statements the consumer sent
	nested     stmtStat   // the sum over the statements run inside those
	count      int        // pg_stat_statements entries
	// The server's WAL position (pg_current_wal_lsn) at the max run's
	// assignment and end.
	walStart, walEnd uint64
}

func (p *profileReport) note(format string, args ...any) {
	p.notes = append(p.notes, fmt.Sprintf(format, args...))
}

// cpuProfile is a CPU profile of the consumer being fetched.
type cpuProfile struct {
	path    string
	seconds int
	started time.Time
	done    chan struct{}
	err     error
}

// startCPUProfile fetches a profile of seconds from the consumer at addr
// into path, in the background.
func startCPUProfile(addr, path string, seconds int) *cpuProfile {
	p := &cpuProfile{path: path, seconds: seconds, started: time.Now(), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.err = fetchTo(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, seconds), path, time.Duration(seconds)*time.Second+30*time.Second)
	}()
	return p
}

// fetchTo writes what url answers to path.
func fetchTo(url, path string, timeout time.Duration) error {
	client := http.Client{Timeout: timeout}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// profileAssigned starts the max run's profiles once the partitions are
// assigned: the consumer's CPU profile, and pg_stat_statements from zero.
func (b *benchmark) profileAssigned(ctx context.Context, addr string, r *serviceResult) {
	p := &profileReport{}
	r.profile = p
	// The WAL position first: read after the reset, it could come after a
	// short max run's last commit (a loaded machine, the --db-latency
	// proxy), which the reset's statements then counted and it did not.
	p.walStart = b.walPosition(ctx)
	p.cpu = startCPUProfile(addr, filepath.Join(b.work, r.Service+"-consumer-cpu.pprof"), b.profileSeconds())
	if _, err := b.db.ExecContext(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		p.note("pg_stat_statements_reset: %v", err)
	}
	p.allocsBase = filepath.Join(b.work, r.Service+"-consumer-allocs-assigned.pprof")
	if err := fetchTo("http://"+addr+"/debug/pprof/allocs", p.allocsBase, 30*time.Second); err != nil {
		p.note("heap allocations at the assignment: %v", err)
		p.allocsBase = ""
	}
}

// walPosition is the server's WAL position in bytes (0 when unread).
func (b *benchmark) walPosition(ctx context.Context) uint64 {
	var pos float64
	if err := b.db.QueryRowContext(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8`).Scan(&pos); err != nil {
		return 0
	}
	return uint64(pos)
}

// profileSeconds is the CPU profile's length: --profile-seconds, at most
// maxProfileSeconds.
func (b *benchmark) profileSeconds() int {
	return min(maxProfileSeconds, max(1, b.ProfileSeconds))
}

// profileEnd takes the rest of the max run's profiles at its end: the
// consumer's heap allocations and PostgreSQL's statements; then it waits
// for the CPU profile, before the paced run.
func (b *benchmark) profileEnd(ctx context.Context, addr string, r *serviceResult) {
	p := r.profile
	if p == nil { // never assigned: the max run failed before
		return
	}
	end := time.Now()
	p.walEnd = b.walPosition(ctx)
	p.allocsPath = filepath.Join(b.work, r.Service+"-consumer-allocs.pprof")
	if err := fetchTo("http://"+addr+"/debug/pprof/allocs", p.allocsPath, 30*time.Second); err != nil {
		p.note("heap allocations: %v", err)
		p.allocsPath = ""
	}
	p.stmtPath = filepath.Join(b.work, r.Service+"-statements.txt")
	if err := b.statements(ctx, r, p); err != nil {
		p.note("pg_stat_statements: %v", err)
		p.stmtPath = ""
	}
	if rest := p.cpu.started.Add(time.Duration(p.cpu.seconds) * time.Second).Sub(end); rest > 0 {
		p.note("the max run ended %.1f s into the %d s CPU profile: its last %.1f s are the consumer idle (a smaller --profile-seconds or a larger --events fits it)",
			end.Sub(p.cpu.started).Seconds(), p.cpu.seconds, rest.Seconds())
		b.say("  waiting %.1f s for the consumer's CPU profile …", rest.Seconds())
	}
	select {
	case <-p.cpu.done:
	case <-ctx.Done():
		return
	}
	if p.cpu.err != nil {
		p.note("CPU profile: %v", p.cpu.err)
	}
}

// profileTop runs go tool pprof -top on the CPU profile, when go is on
// $PATH (after the consumer stopped: it takes a core for a few seconds).
func (b *benchmark) profileTop(ctx context.Context, r *serviceResult) {
	p := r.profile
	if p == nil || p.cpu.err != nil {
		return
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, gobin, "tool", "pprof", "-top", "-nodecount=15",
		filepath.Join(b.bin, r.Service+"-consumers"), p.cpu.path).CombinedOutput()
	if err != nil {
		p.note("go tool pprof: %v: %s", err, strings.TrimSpace(string(out)))
		return
	}
	p.cpuTop = string(out)
}

// stmtStat is one pg_stat_statements entry over the max run, or a sum
// of them.
type stmtStat struct {
	calls, rows, totalMs              float64
	hit, read, dirtied, written, walB float64
	query                             string
	nested                            bool // run inside another statement (a foreign-key check, pg_stat_statements.track=all)
	variants                          int  // entries summed
}

func (a *stmtStat) add(s stmtStat) {
	a.calls, a.rows, a.totalMs, a.walB = a.calls+s.calls, a.rows+s.rows, a.totalMs+s.totalMs, a.walB+s.walB
	a.hit, a.read, a.dirtied, a.written = a.hit+s.hit, a.read+s.read, a.dirtied+s.dirtied, a.written+s.written
	a.variants += max(1, s.variants)
}

// stmtShape is how many characters of a statement name its shape: ent
// writes one statement per batch size (VALUES lists, CASE arms, IN
// lists), each an entry of its own.
const stmtShape = 60

// statements reads the consumer's statements over the max run (not the
// benchmark's own, which run as the superuser), sets the totals per
// event and writes the top ones, and the top shapes, to p.stmtPath. The
// totals are over the statements the consumer sent: a nested one's time,
// blocks and WAL are its parent's too.
func (b *benchmark) statements(ctx context.Context, r *serviceResult, p *profileReport) error {
	rows, err := b.db.QueryContext(ctx, `
SELECT calls, rows, total_exec_time, shared_blks_hit, shared_blks_read, shared_blks_dirtied, shared_blks_written, wal_bytes::float8, NOT toplevel, query
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND userid <> (SELECT oid FROM pg_roles WHERE rolname = current_user)
ORDER BY total_exec_time DESC`)
	if err != nil {
		return err
	}
	defer rows.Close()
	shapes := map[string]*stmtStat{}
	var order []string
	for rows.Next() {
		var s stmtStat
		if err := rows.Scan(&s.calls, &s.rows, &s.totalMs, &s.hit, &s.read, &s.dirtied, &s.written, &s.walB, &s.nested, &s.query); err != nil {
			return err
		}
		s.query = oneLine(s.query, 160)
		p.count++
		if s.nested {
			p.nested.add(s)
		} else {
			p.all.add(s)
		}
		if len(p.stmts) < topStatements {
			p.stmts = append(p.stmts, s)
		}
		key := fmt.Sprint(s.nested, oneLine(s.query, stmtShape))
		if shapes[key] == nil {
			shapes[key] = &stmtStat{query: oneLine(s.query, stmtShape), nested: s.nested}
			order = append(order, key)
		}
		shapes[key].add(s)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var sb strings.Builder
	n := float64(r.Events)
	r.Consumer.StatementsPerEvent = p.all.calls / n
	r.Consumer.NestedStatementsPerEvent = p.nested.calls / n
	r.Consumer.WALBytesPerEvent = p.all.walB / n
	if p.walStart > 0 && p.walEnd >= p.walStart {
		r.Consumer.ServerWALBytesPerEvent = float64(p.walEnd-p.walStart) / n
	}
	fmt.Fprintf(&sb, "pg_stat_statements over the %s max run (partitions assigned → last offset committed, %s events),\n"+
		"the consumer's statements, %s entries. Per event: %.3f statements sent (BEGIN and COMMIT included),\n"+
		"%.3f more nested in them (foreign-key checks: their time, blocks and WAL are the parent's too),\n"+
		"%.0f WAL bytes (the statements'; commit records come after a COMMIT's measure: the server wrote %s).\n"+
		"Execution time of the statements sent: %.0f ms; share is of it. blocks are shared buffers per call:\n"+
		"hit / read / dirtied / written.\n",
		r.Service, thousands(n), thousands(float64(p.count)), p.all.calls/n, p.nested.calls/n, p.all.walB/n, p.serverWAL(n), p.all.totalMs)
	fmt.Fprintf(&sb, "\nThe top %d entries by total execution time:\n\n", len(p.stmts))
	writeStmts(&sb, p.stmts, p.all.totalMs, n, 160)
	var grouped []stmtStat
	for _, k := range order {
		grouped = append(grouped, *shapes[k])
	}
	sort.SliceStable(grouped, func(i, j int) bool { return grouped[i].totalMs > grouped[j].totalMs })
	fmt.Fprintf(&sb, "\nBy shape (the first %d characters; ent writes a statement per batch size), the top %d of %d:\n\n",
		stmtShape, min(topStatements, len(grouped)), len(grouped))
	writeStmts(&sb, grouped[:min(topStatements, len(grouped))], p.all.totalMs, n, stmtShape)
	return os.WriteFile(p.stmtPath, []byte(sb.String()), 0o644)
}

// serverWAL says the WAL the server wrote per event over the max run
// (pg_current_wal_lsn), when both ends were read.
func (p *profileReport) serverWAL(n float64) string {
	if p.walEnd < p.walStart || p.walStart == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f bytes per event", float64(p.walEnd-p.walStart)/n)
}

func writeStmts(out io.Writer, stmts []stmtStat, totalMs, n float64, width int) {
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "total ms\tshare\tentries\tcalls\tcalls/ev\trows/call\tmean ms\tblocks\tWAL B/ev\t  query\n")
	for _, s := range stmts {
		c := max(s.calls, 1)
		q := s.query
		if s.nested {
			q = "(nested) " + q
		}
		fmt.Fprintf(w, "%.1f\t%.1f %%\t%d\t%s\t%.3f\t%.2f\t%.3f\t%s\t%.0f\t  %s\n",
			s.totalMs, 100*s.totalMs/max(totalMs, 1e-9), max(1, s.variants), thousands(s.calls), s.calls/n, s.rows/c, s.totalMs/c,
			fmt.Sprintf("%.1f / %.2f / %.2f / %.2f", s.hit/c, s.read/c, s.dirtied/c, s.written/c), s.walB/n, oneLine(q, width))
	}
	w.Flush()
}

// oneLine folds q's white space and cuts it to at most n runes.
func oneLine(q string, n int) string {
	q = strings.Join(strings.Fields(q), " ")
	if r := []rune(q); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return q
}

// printProfile says what --profile took, below the consumer's table.
func (b *benchmark) printProfile(r *serviceResult) {
	p := r.profile
	if p == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.Out
	fmt.Fprintf(out, "  profiles of the max run (--profile) in %s:\n", b.work)
	if p.cpu.err == nil {
		fmt.Fprintf(out, "    consumer CPU, %d s from the partitions' assignment: %s\n", p.cpu.seconds, filepath.Base(p.cpu.path))
	}
	if p.allocsPath != "" {
		fmt.Fprintf(out, "    consumer heap allocations at the max run's end: %s", filepath.Base(p.allocsPath))
		if p.allocsBase != "" {
			fmt.Fprintf(out, ", at its start: %s (the max run's: go tool pprof -sample_index=alloc_space -diff_base %[1]s %s)", filepath.Base(p.allocsBase), filepath.Base(p.allocsPath))
		}
		fmt.Fprintln(out)
	}
	if p.stmtPath != "" {
		fmt.Fprintf(out, "    PostgreSQL statements (pg_stat_statements), the top %d and the top shapes: %s\n", topStatements, filepath.Base(p.stmtPath))
	}
	for _, n := range p.notes {
		fmt.Fprintf(out, "  ! %s\n", n)
	}
	if p.cpuTop != "" {
		fmt.Fprintf(out, "  go tool pprof -top -nodecount=15 %s %s:\n", filepath.Join(b.bin, r.Service+"-consumers"), p.cpu.path)
		for _, l := range strings.Split(strings.TrimRight(p.cpuTop, "\n"), "\n") {
			fmt.Fprintf(out, "    %s\n", l)
		}
	}
	if len(p.stmts) > 0 {
		n := float64(r.Events)
		fmt.Fprintf(out, "  PostgreSQL over the max run, per event: %.3f statements sent (BEGIN and COMMIT included) and %.3f nested in them; %.0f WAL bytes by the statements (the server wrote %s); the top %d by total execution time:\n",
			p.all.calls/n, p.nested.calls/n, p.all.walB/n, p.serverWAL(n), min(printStatements, len(p.stmts)))
		w := tabwriter.NewWriter(out, 2, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(w, "    total ms\tshare\tcalls/ev\tmean ms\trows/call\tWAL B/ev\t  query\n")
		for _, s := range p.stmts[:min(printStatements, len(p.stmts))] {
			q := s.query
			if s.nested {
				q = "(nested) " + q
			}
			fmt.Fprintf(w, "    %.0f\t%.0f %%\t%.3f\t%.3f\t%.1f\t%.0f\t  %s\n",
				s.totalMs, 100*s.totalMs/max(p.all.totalMs, 1e-9), s.calls/n, s.totalMs/max(s.calls, 1), s.rows/max(s.calls, 1), s.walB/n, oneLine(q, 100))
		}
		w.Flush()
	}
}
