package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/lib/pq"

	"github.com/pin-platform/pin/consumers/demo"
	"github.com/pin-platform/pin/consumers/roster"
	"github.com/pin-platform/pin/internal/kafkaenv"
	"github.com/pin-platform/pin/internal/term"
	"github.com/pin-platform/pin/migrate"
	"github.com/pin-platform/pin/migrate/localpg"
)

func init() {
	register(command{name: "dev", summary: "the whole system on an embedded default, with a demo scenario (make run)", run: runDev})
}

type devOptions struct {
	once      bool
	events    int
	dataDir   string
	scale     string
	stopDB    bool
	quietLogs bool
	timeout   time.Duration
}

func runDev(ctx context.Context, args []string) error {
	fs := newFlags("dev", "dev [--once] [--events N] [--data DIR]",
		"Starts a local PostgreSQL (data under DIR/postgres, kept between runs) or uses\n"+
			"$DATABASE_URL, an in-process Kafka-protocol broker (librdkafka's mock cluster)\n"+
			"or $KAFKA_BOOTSTRAP_SERVERS, applies the migrations, starts the three consumers\n"+
			"(bin/*-consumers, the real binaries), provisions demo chats and leads, produces a\n"+
			"scenario that touches every path, prints each processed event, then a summary.\n"+
			"Ctrl-C stops everything. With --once it exits after the summary: 0 when the\n"+
			"scenario reached its expected outcome.")
	o := devOptions{}
	fs.BoolVar(&o.once, "once", false, "exit after the summary (non-interactive; exit 1 if the outcome is not the expected one)")
	fs.IntVar(&o.events, "events", 0, "also produce N events of realistic load, with a progress bar")
	fs.StringVar(&o.dataDir, "data", ".data", "directory of the local PostgreSQL's data")
	fs.StringVar(&o.scale, "retry-time-scale", "0.1", "RETRY_TIME_SCALE of the consumers (0.1: a 30 s wait takes 3 s)")
	fs.BoolVar(&o.stopDB, "stop-db", false, "only stop the local PostgreSQL of --data, if it runs")
	fs.BoolVar(&o.quietLogs, "quiet", false, "do not print a line per processed event")
	fs.DurationVar(&o.timeout, "timeout", 3*time.Minute, "how long to wait for the consumers to catch up")
	if _, err := parseArgs(fs, args, 0, 0); err != nil {
		return err
	}
	if o.stopDB {
		return stopLocalDB(filepath.Join(o.dataDir, "postgres"))
	}
	d := &dev{opts: o, out: os.Stdout, tty: term.IsTerminal(os.Stdout)}
	return d.run(ctx)
}

type dev struct {
	opts    devOptions
	out     io.Writer
	tty     bool
	mu      sync.Mutex // serialises output lines
	dbURL   string     // the superuser's, on the local server: the scenario plays other components
	brokers string
	db      *sql.DB

	migrateURL  string                      // the migrations' (the schema owner's)
	serviceUser func(service string) string // the login each consumer runs as; nil: dbURL's
}

func (d *dev) say(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, format+"\n", args...)
}

func (d *dev) run(ctx context.Context) error {
	bin, err := binDir()
	if err != nil {
		return err
	}

	// PostgreSQL. On the local server the migrations run as the schema's
	// owner and each consumer as its service's login (README, "Database
	// roles"); a $DATABASE_URL serves everything as it is.
	d.migrateURL = d.dbURL
	if u := os.Getenv("DATABASE_URL"); u != "" {
		d.dbURL, d.migrateURL = u, u
		d.say("▸ PostgreSQL: $DATABASE_URL (%s)", migrate.Redact(u))
	} else {
		dir := filepath.Join(d.opts.dataDir, "postgres")
		d.say("▸ PostgreSQL: starting the local server in %s …", dir)
		srv, err := localpg.Start(ctx, dir, localpg.Options{Durable: true})
		if err != nil {
			return err
		}
		defer func() {
			if err := srv.Stop(); err != nil {
				d.say("! stopping PostgreSQL: %v", err)
			}
		}()
		if err := setUpRoles(ctx, srv.URL("postgres"), "pin"); err != nil {
			return err
		}
		d.dbURL = srv.URL("pin")
		d.migrateURL = withUser(d.dbURL, migrate.OwnerRole)
		d.serviceUser = migrate.ServiceLogin
	}
	d.db, err = sql.Open("postgres", d.dbURL)
	if err != nil {
		return err
	}
	defer d.db.Close()

	dir, err := migrate.Embedded()
	if err != nil {
		return err
	}
	applied, err := migrate.Apply(ctx, d.migrateURL, dir)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		d.say("▸ migrations: up to date")
	} else {
		d.say("▸ migrations: %d applied (%s)", len(applied), strings.Join(applied, ", "))
	}
	if d.serviceUser != nil {
		if err := ensureLogins(ctx, d.dbURL); err != nil {
			return err
		}
	}

	// Kafka.
	if b := os.Getenv("KAFKA_BOOTSTRAP_SERVERS"); b != "" {
		d.brokers = b
		d.say("▸ Kafka: $KAFKA_BOOTSTRAP_SERVERS (%s); the topics must exist", b)
	} else {
		mc, err := kafka.NewMockCluster(1)
		if err != nil {
			return fmt.Errorf("start the in-process broker: %w", err)
		}
		defer mc.Close()
		for _, t := range demo.Topics {
			for _, name := range []string{t.Name, t.DLQ} {
				if err := mc.CreateTopic(name, t.Partitions, 1); err != nil {
					return fmt.Errorf("create topic %s: %w", name, err)
				}
			}
		}
		d.brokers = mc.BootstrapServers()
		d.say("▸ Kafka: in-process broker at %s with the topics of docs/contract.md §3", d.brokers)
	}

	// The consumers.
	ctx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	procs, err := d.startConsumers(ctx, bin)
	if err != nil {
		return err
	}
	defer d.stopConsumers(procs)
	if err := d.waitReady(ctx, procs); err != nil {
		return err
	}

	// The scenario.
	p, err := newDevProducer(d.brokers)
	if err != nil {
		return err
	}
	defer p.close()
	start := d.watermarks()
	sc := demo.NewScenario(time.Now())
	if err := d.play(ctx, p, sc.Setup); err != nil {
		return err
	}
	if err := d.play(ctx, p, sc.Steps); err != nil {
		return err
	}
	if d.opts.events > 0 {
		if err := d.load(ctx, p, d.opts.events); err != nil {
			return err
		}
	}
	if err := d.waitCaughtUp(ctx); err != nil {
		d.say("! %v", err)
	}
	bad := sc.Check(ctx, d.db)
	bad = append(bad, d.checkDLQ(sc, start)...)
	d.summary(procs)
	if len(bad) == 0 {
		d.say("\n✔ the scenario reached its expected outcome")
	} else {
		d.say("\n✘ the scenario did not reach its expected outcome:")
		for _, b := range bad {
			d.say("  - %s", b)
		}
	}
	if !d.opts.once {
		d.say("\nThe consumers keep running. Ctrl-C stops everything.")
		<-ctx.Done()
		d.say("\n▸ stopping …")
	}
	if code := d.stopConsumers(procs); code != 0 {
		return fmt.Errorf("a consumer exited with code %d", code)
	}
	if len(bad) > 0 {
		return errors.New("the scenario did not reach its expected outcome")
	}
	return nil
}

// binDir is where the consumer binaries are: beside pinctl.
func binDir() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(exe)
	for _, s := range []string{"messenger-consumers", "rewards-consumers", "crm-consumers"} {
		if _, err := os.Stat(filepath.Join(dir, s)); err != nil {
			return "", fmt.Errorf("%s not found beside pinctl in %s: run `make build` (make run does)", s, dir)
		}
	}
	return dir, nil
}

// setUpRoles makes the local server's database name owned by the schema
// owner role (created when missing), migrating what an earlier version of
// the environment created as the superuser.
func setUpRoles(ctx context.Context, adminURL, name string) error {
	db, err := sql.Open("postgres", adminURL)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := migrate.EnsureOwner(ctx, db, ""); err != nil {
		return err
	}
	owner := pq.QuoteIdentifier(migrate.OwnerRole)
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		_, err := db.ExecContext(ctx, `CREATE DATABASE `+pq.QuoteIdentifier(name)+` OWNER `+owner)
		return err
	}
	if _, err := db.ExecContext(ctx, `ALTER DATABASE `+pq.QuoteIdentifier(name)+` OWNER TO `+owner); err != nil {
		return err
	}
	// Tables, sequences and the revision schema an earlier environment
	// created as the superuser.
	pdb, err := sql.Open("postgres", withDB(adminURL, name))
	if err != nil {
		return err
	}
	defer pdb.Close()
	_, err = pdb.ExecContext(ctx, `DO $$
DECLARE o record;
BEGIN
  FOR o IN SELECT c.oid::regclass AS rel FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname IN ('public', 'atlas_schema_revisions') AND c.relkind IN ('r', 'S', 'p')
      AND pg_get_userbyid(c.relowner) <> '`+migrate.OwnerRole+`' LOOP
    EXECUTE format('ALTER TABLE %s OWNER TO `+migrate.OwnerRole+`', o.rel);
  END LOOP;
  IF EXISTS (SELECT FROM pg_namespace WHERE nspname = 'atlas_schema_revisions') THEN
    ALTER SCHEMA atlas_schema_revisions OWNER TO `+migrate.OwnerRole+`;
  END IF;
END $$`)
	return err
}

// ensureLogins creates each service's login (migrate.ServiceLogin) on the
// server of adminURL, a superuser's.
func ensureLogins(ctx context.Context, adminURL string) error {
	admin, err := sql.Open("postgres", adminURL)
	if err != nil {
		return err
	}
	defer admin.Close()
	for _, s := range roster.All {
		svc := s.Name
		if err := migrate.EnsureLogin(ctx, admin, migrate.ServiceLogin(svc), "", migrate.ServiceRole(svc)); err != nil {
			return err
		}
	}
	return nil
}

// withUser is url u with user user (the local server trusts local
// connections: no password).
func withUser(u, user string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	p.User = url.User(user)
	return p.String()
}

// withDB is url u for database name.
func withDB(u, name string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	p.Path = "/" + name
	return p.String()
}

func stopLocalDB(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "postmaster.pid")); err != nil {
		return nil
	}
	srv, err := localpg.Start(context.Background(), dir, localpg.Options{Durable: true})
	if err != nil {
		return err
	}
	return srv.Stop()
}

// proc is a consumer child process.
type proc struct {
	service string
	cmd     *exec.Cmd
	addr    string
	done    chan struct{}
	code    int
}

// defaultPort is a service's default HTTP port (the roster's).
func defaultPort(service string) int {
	s, _ := roster.Named(service)
	return s.Port
}

func (d *dev) startConsumers(ctx context.Context, bin string) ([]*proc, error) {
	var procs []*proc
	for _, t := range demo.Topics {
		addr := freeAddr(defaultPort(t.Service))
		cmd := exec.Command(filepath.Join(bin, t.Service+"-consumers"))
		cmd.Env = append(os.Environ(),
			"KAFKA_BOOTSTRAP_SERVERS="+d.brokers,
			"DATABASE_URL="+d.consumerURL(t.Service),
			"HTTP_ADDR="+addr,
			"LOG_LEVEL=info",
			"RETRY_TIME_SCALE="+d.opts.scale,
			"KAFKA_SESSION_TIMEOUT_MS=6000",
			"KAFKA_HEARTBEAT_INTERVAL_MS=500",
		)
		stderr, err := cmd.StderrPipe()
		if err != nil {
			return procs, err
		}
		if err := cmd.Start(); err != nil {
			return procs, fmt.Errorf("start %s: %w", t.Service, err)
		}
		p := &proc{service: t.Service, cmd: cmd, addr: addr, done: make(chan struct{})}
		go d.follow(p, stderr)
		go func() {
			err := cmd.Wait()
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				p.code = ee.ExitCode()
			}
			close(p.done)
		}()
		procs = append(procs, p)
		d.say("▸ %s consumer started (pid %d): http://%s/metrics", t.Service, cmd.Process.Pid, addr)
	}
	return procs, nil
}

// freeAddr is 127.0.0.1:port when that port is free, else a free one.
func freeAddr(port int) string {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		return addr
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return addr
	}
	defer l.Close()
	return l.Addr().String()
}

func (d *dev) waitReady(ctx context.Context, procs []*proc) error {
	deadline := time.Now().Add(60 * time.Second)
	for _, p := range procs {
		for {
			select {
			case <-p.done:
				return fmt.Errorf("%s consumer exited with code %d", p.service, p.code)
			default:
			}
			resp, err := http.Get("http://" + p.addr + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s consumer not ready after 60 s", p.service)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	d.say("▸ all three consumers joined their groups\n")
	return nil
}

// stopConsumers sends SIGTERM and waits; it returns the first non-zero exit
// code.
func (d *dev) stopConsumers(procs []*proc) int {
	code := 0
	for _, p := range procs {
		select {
		case <-p.done:
			continue
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if p.code != 0 && code == 0 {
			code = p.code
		}
	}
	return code
}

// follow turns a consumer's JSON log lines into one line per processed
// event, and passes warnings and errors through. What it prints of a log
// line (fields that may come from a message: EventType, ids, errors) goes
// through term.Printable.
func (d *dev) follow(p *proc, r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		var ev map[string]any
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			d.say("  %-9s %s", p.service, term.Printable(strings.ReplaceAll(sc.Text(), "\t", "    ")))
			continue
		}
		if d.opts.quietLogs {
			continue
		}
		str := func(k string) string {
			if v, ok := ev[k]; ok && v != nil {
				return term.Printable(fmt.Sprint(v))
			}
			return ""
		}
		if out := str("outcome"); out != "" {
			if d.opts.events > 0 && out != "dead-lettered" && out != "parked" && str("level") == "info" && strings.HasPrefix(out, "applied") {
				continue
			}
			var extra []string
			for _, k := range []string{"code", "BondId", "Status", "LeadId", "ChatId", "added", "removed", "roleChanged", "SelectionId", "Action", "Version"} {
				if v := str(k); v != "" {
					extra = append(extra, k+"="+shortID(v))
				}
			}
			d.say("  %-9s %s[%s]@%-4s %-34s %-24s %s", p.service, shortTopic(p.service), str("partition"), str("offset"),
				str("EventType"), out, strings.Join(extra, " "))
			continue
		}
		if lvl := str("level"); lvl == "warn" || lvl == "error" {
			d.say("  %-9s %s: %s %s", p.service, lvl, str("message"), str("error"))
		}
	}
}

func shortTopic(service string) string {
	for _, t := range demo.Topics {
		if t.Service == service {
			return t.Name
		}
	}
	return service
}

func shortID(v string) string {
	if len(v) == 36 && strings.Count(v, "-") == 4 {
		return v[:8]
	}
	return v
}

func (d *dev) play(ctx context.Context, p *devProducer, steps []demo.Step) error {
	for _, st := range steps {
		if st.After > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(st.After):
			}
		}
		if st.Say != "" {
			d.say("\n● %s", st.Say)
		}
		if st.SQL != "" {
			if _, err := d.db.ExecContext(ctx, st.SQL, st.SQLArgs...); err != nil {
				return fmt.Errorf("%s: %w", st.Say, err)
			}
		}
		for _, e := range st.Events {
			if e.Note != "" {
				d.say("  → %s", e.Note)
			}
			if err := p.produce(e); err != nil {
				return err
			}
		}
		if err := p.flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

// load produces n events of the realistic mix, with a progress bar.
func (d *dev) load(ctx context.Context, p *devProducer, n int) error {
	l := demo.NewLoad(uint64(time.Now().UnixNano()), 100, 100)
	d.say("\n● %d events of realistic load", n)
	if err := d.play(ctx, p, l.Setup()); err != nil {
		return err
	}
	bar := term.NewProgress(d.out, d.tty, "produce", n)
	for i := 0; i < n; i++ {
		if err := p.produce(l.Next()); err != nil {
			return err
		}
		bar.Set(i + 1)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if err := p.flush(ctx); err != nil {
		return err
	}
	bar.Done()
	return nil
}

// watermarks returns the high watermark per source partition.
func (d *dev) watermarks() map[string]map[int32]int64 {
	out := map[string]map[int32]int64{}
	c, err := kafka.NewConsumer(kafkaenv.Client(d.brokers, kafka.ConfigMap{"group.id": "pinctl-dev-watermarks"}))
	if err != nil {
		return out
	}
	defer c.Close()
	for _, t := range demo.Topics {
		for _, name := range []string{t.Name, t.DLQ} {
			out[name] = map[int32]int64{}
			for p := 0; p < t.Partitions; p++ {
				_, hi, err := c.QueryWatermarkOffsets(name, int32(p), 5000)
				if err == nil {
					out[name][int32(p)] = hi
				}
			}
		}
	}
	return out
}

// waitCaughtUp waits until every group committed its topic's high
// watermarks and no message is parked.
func (d *dev) waitCaughtUp(ctx context.Context) error {
	var bar *term.Progress
	deadline := time.Now().Add(d.opts.timeout)
	for {
		hi := d.watermarks()
		total, done := int64(0), int64(0)
		for _, t := range demo.Topics {
			committed := d.committed(t.Group, t.Name, t.Partitions)
			for p, h := range hi[t.Name] {
				total += h
				done += min(committed[p], h)
			}
		}
		var parked int
		_ = d.db.QueryRowContext(ctx, `SELECT count(*) FROM parked_messages`).Scan(&parked)
		if d.opts.events > 0 {
			if bar == nil {
				bar = term.NewProgress(d.out, d.tty, "consume", int(total))
			}
			bar.Set(int(done))
		}
		if done == total && parked == 0 {
			if bar != nil {
				bar.Done()
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the consumers did not catch up in %s (%d of %d offsets committed, %d parked)", d.opts.timeout, done, total, parked)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (d *dev) committed(group, topic string, partitions int) map[int32]int64 {
	out := map[int32]int64{}
	c, err := kafka.NewConsumer(kafkaenv.Client(d.brokers, kafka.ConfigMap{"group.id": group}))
	if err != nil {
		return out
	}
	defer c.Close()
	var tps []kafka.TopicPartition
	for p := 0; p < partitions; p++ {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: int32(p)})
	}
	got, err := c.Committed(tps, 5000)
	if err != nil {
		return out
	}
	for _, tp := range got {
		if tp.Offset >= 0 {
			out[tp.Partition] = int64(tp.Offset)
		}
	}
	return out
}

// dlqCodes reads the DLQ messages past the given watermarks, by code.
func (d *dev) dlqCodes(topic string, from map[int32]int64) map[string]int {
	codes := map[string]int{}
	c, err := kafka.NewConsumer(kafkaenv.Client(d.brokers, kafka.ConfigMap{"group.id": "pinctl-dev-dlq", "enable.auto.commit": false}))
	if err != nil {
		return codes
	}
	defer c.Close()
	var tps []kafka.TopicPartition
	want := 0
	for p, o := range from {
		_, hi, err := c.QueryWatermarkOffsets(topic, p, 5000)
		if err != nil || hi <= o {
			continue
		}
		want += int(hi - o)
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(o)})
	}
	if len(tps) == 0 {
		return codes
	}
	if err := c.Assign(tps); err != nil {
		return codes
	}
	deadline := time.Now().Add(10 * time.Second)
	for n := 0; n < want && time.Now().Before(deadline); {
		if m, ok := c.Poll(100).(*kafka.Message); ok {
			n++
			for _, h := range m.Headers {
				if h.Key == "x-dlq-error-code" {
					codes[string(h.Value)]++
				}
			}
		}
	}
	return codes
}

func (d *dev) checkDLQ(sc *demo.Scenario, start map[string]map[int32]int64) []string {
	var bad []string
	for topic, want := range sc.DLQ {
		got := d.dlqCodes(topic, start[topic])
		for code, n := range want {
			if got[code] != n {
				bad = append(bad, fmt.Sprintf("%s: %d × %s, want %d", topic, got[code], term.Printable(code), n))
			}
		}
		for code, n := range got {
			if _, ok := want[code]; !ok && d.opts.events == 0 {
				bad = append(bad, fmt.Sprintf("%s: %d unexpected × %s", topic, n, term.Printable(code)))
			}
		}
	}
	return bad
}

// summary prints what the database and the DLQs hold now.
func (d *dev) summary(procs []*proc) {
	ctx := context.Background()
	w := tabwriter.NewWriter(d.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "\n═══ summary (the whole database, earlier runs included) ═══")
	rows := func(title, query string) {
		fmt.Fprintf(w, "\n%s\n", title)
		r, err := d.db.QueryContext(ctx, query)
		if err != nil {
			fmt.Fprintf(w, "  error: %v\n", err)
			return
		}
		defer r.Close()
		cols, _ := r.Columns()
		fmt.Fprintf(w, "  %s\n", strings.Join(cols, "\t"))
		for r.Next() {
			vals := make([]sql.NullString, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := r.Scan(ptrs...); err != nil {
				return
			}
			s := make([]string, len(vals))
			for i, v := range vals {
				s[i] = term.Printable(v.String)
			}
			fmt.Fprintf(w, "  %s\n", strings.Join(s, "\t"))
		}
	}
	rows("rewards · referral_bond_replicas", `SELECT status, count(*) AS bonds FROM referral_bond_replicas GROUP BY status ORDER BY status`)
	rows("messenger · lead chats", `SELECT count(DISTINCT c.id) AS chats,
		count(p.id) FILTER (WHERE p.removed_at IS NULL) AS active_members,
		count(p.id) FILTER (WHERE p.removed_at IS NOT NULL) AS removed_members,
		(SELECT count(*) FROM chat_events) AS feed_facts,
		(SELECT count(*) FROM chat_updates) AS realtime_updates
		FROM chats c LEFT JOIN chat_participants p ON p.chat_id = c.id WHERE c.kind = 'Lead'`)
	rows("crm · lead_events", `SELECT type, count(*) AS events FROM lead_events GROUP BY type ORDER BY type`)
	rows("processed_messages (idempotency marks)", `SELECT consumer_group, outcome, count(*) AS messages FROM processed_messages GROUP BY 1, 2 ORDER BY 1, 2`)
	rows("parked_messages (waiting to retry)", `SELECT consumer_group, error_code, count(*) FROM parked_messages GROUP BY 1, 2 ORDER BY 1, 2`)

	fmt.Fprintf(w, "\nDLQs\n  topic\tcode\tmessages\n")
	all := map[int32]int64{}
	for _, t := range demo.Topics {
		for p := 0; p < t.Partitions; p++ {
			all[int32(p)] = 0
		}
		codes := d.dlqCodes(t.DLQ, all)
		keys := make([]string, 0, len(codes))
		for k := range codes {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %s\t%s\t%d\n", t.DLQ, term.Printable(k), codes[k])
		}
	}
	fmt.Fprintln(w, "\nwhere to look")
	for _, p := range procs {
		fmt.Fprintf(w, "  %s\thttp://%s/metrics  /healthz  /readyz\n", p.service, p.addr)
	}
	fmt.Fprintf(w, "  database\tpsql '%s'\n", migrate.Redact(d.dbURL))
	fmt.Fprintf(w, "  DLQ\tKAFKA_BOOTSTRAP_SERVERS=%s bin/pinctl dlq list --topic %s (while this runs)\n", d.brokers, demo.CRMDLQ)
	w.Flush()
}

// devProducer produces with delivery reports drained in the background.
type devProducer struct {
	p       *kafka.Producer
	mu      sync.Mutex
	err     error
	pending sync.WaitGroup
}

// newLoadProducer is the idempotent producer pinctl feeds topics with
// (dev scenarios, bench loads): lingerMs batches sends, 0 sends each
// message at once (latency measurements).
func newLoadProducer(brokers string, lingerMs int) (*kafka.Producer, error) {
	return kafka.NewProducer(kafkaenv.Client(brokers, kafka.ConfigMap{
		"enable.idempotence":           true,
		"linger.ms":                    lingerMs,
		"queue.buffering.max.messages": 1000000,
	}))
}

func newDevProducer(brokers string) (*devProducer, error) {
	p, err := newLoadProducer(brokers, 5)
	if err != nil {
		return nil, err
	}
	dp := &devProducer{p: p}
	go func() {
		for ev := range p.Events() {
			if m, ok := ev.(*kafka.Message); ok {
				if m.TopicPartition.Error != nil {
					dp.mu.Lock()
					dp.err = m.TopicPartition.Error
					dp.mu.Unlock()
				}
				dp.pending.Done()
			}
		}
	}()
	return dp, nil
}

func (p *devProducer) produce(e demo.Event) error {
	topic := e.Topic
	p.pending.Add(1)
	for {
		err := p.p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Key: e.Key, Value: e.Value}, nil)
		var ke kafka.Error
		if errors.As(err, &ke) && ke.Code() == kafka.ErrQueueFull {
			p.p.Flush(100)
			continue
		}
		if err != nil {
			p.pending.Done()
		}
		return err
	}
}

func (p *devProducer) flush(ctx context.Context) error {
	done := make(chan struct{})
	go func() { p.pending.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *devProducer) close() { p.p.Flush(5000); p.p.Close() }

// consumerURL is the DATABASE_URL a service's consumer runs with.
func (d *dev) consumerURL(service string) string {
	if d.serviceUser == nil {
		return d.dbURL
	}
	return withUser(d.dbURL, d.serviceUser(service))
}
