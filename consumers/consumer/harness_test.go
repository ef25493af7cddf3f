package consumer_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/ent/lead"
	"github.com/pin-platform/pin/migrate/pgtest"
)

// The probe service is the runtime's test service: a tiny handler whose
// payload says how to fail, over the real leads/lead_events tables.

const (
	probeTopic = "test.probe.v1"
	probeDLQ   = "test.probe-dlq.v1"
	probeGroup = "test-probe"
	probeType  = "test.probe"
)

var (
	probeInvalid  = consumer.Code{Name: "PROBE_INVALID", Class: consumer.Invalid}
	probeConflict = consumer.Code{Name: "PROBE_CONFLICT", Class: consumer.RetryNow}
)

// flakySeen holds the MessageIds of "flaky" messages run once.
var flakySeen sync.Map

// conflictRuns counts the handler's runs of "conflict" messages.
var conflictRuns atomic.Int64

// slowStarted holds the MessageIds of "slow" messages whose handler has
// started (it then sleeps for slowFor before applying).
var slowStarted sync.Map

// slowFor is long against the broker's fetch wait (the mock broker
// answers an empty fetch only after fetch.wait.max.ms, 500 ms), so that a
// message produced once a slow one started is queued behind it for long.
const slowFor = 3 * time.Second

// holds maps the MessageId of a "hold" message to its hold: its handler
// signals started, then waits for release before applying.
var holds sync.Map

type hold struct {
	started, release chan struct{}
	once             *sync.Once
}

// holdMessage registers a hold for the message id, released at the end of
// the test at the latest.
func holdMessage(t *testing.T, id uuid.UUID) hold {
	h := hold{make(chan struct{}), make(chan struct{}), &sync.Once{}}
	holds.Store(id, h)
	t.Cleanup(h.Release)
	return h
}

// Release lets the held handler go on.
func (h hold) Release() { h.once.Do(func() { close(h.release) }) }

// awaitStarted waits up to 30 s for the held handler to start.
func (h hold) awaitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-h.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the held message's handler did not start")
	}
}

// failEveryFeedInsert makes every insert into lead_events fail with an
// error the runtime does not know (a trigger named name), as a bug in a
// statement would: a failure every message meets.
func (e *env) failEveryFeedInsert(name string) {
	e.t.Helper()
	if _, err := e.db.Exec(`CREATE FUNCTION ` + name + `() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'boom'; END $$;
		CREATE TRIGGER ` + name + ` BEFORE INSERT ON lead_events FOR EACH ROW EXECUTE FUNCTION ` + name + `()`); err != nil {
		e.t.Fatal(err)
	}
}

type probePayload struct {
	LeadID uuid.UUID `json:"LeadId"`
	Mode   string    // "", "invalid", "conflict", "panic", "second-layer", "bug", "flaky", "slow", "hold", "unstorable", "drop-marks", "fields-panic", "invalid-fields-panic"
}

// probeView is what the probe's Read read for a transaction: the leads of
// its messages; with the feed entries its decisions queued.
type probeView struct {
	msgs     []*consumer.Message
	leads    map[uuid.UUID]*ent.Lead
	appends  []probeAppend
	prepared bool // set by a test's Read wrapped around probeRead
}

// probeAppend is a lead_events row the probe queued.
type probeAppend struct {
	lead       *ent.Lead
	at         time.Time
	unstorable bool // a time timestamptz refuses (22009), found only by the Write
	dropMarks  bool // the Write builds the marks' insert and does not send it (a bug)
}

// probeRead reads the leads of the messages' payloads, with one statement.
func probeRead(ctx context.Context, tx *ent.Tx, msgs []*consumer.Message) (*probeView, error) {
	v := &probeView{msgs: msgs, leads: map[uuid.UUID]*ent.Lead{}}
	var ids []uuid.UUID
	for _, m := range msgs {
		if p, err := consumer.DecodePayload[probePayload](m); err == nil {
			ids = append(ids, p.LeadID)
		}
	}
	if len(ids) == 0 {
		return v, nil
	}
	ls, err := tx.Lead.Query().Where(lead.IDIn(ids...)).All(ctx)
	if err != nil {
		return nil, err
	}
	for _, l := range ls {
		v.leads[l.ID] = l
	}
	return v, nil
}

// probeWrite appends the queued feed entries.
func probeWrite(ctx context.Context, tx *ent.Tx, v *probeView, marks *consumer.Marks) error {
	if len(v.appends) > 0 { // the marks first, in a statement of their own here
		b := entsql.Builder{}
		b.SetDialect(dialect.Postgres)
		b.WriteString("WITH ")
		if marks.Item(&b) && !slices.ContainsFunc(v.appends, func(a probeAppend) bool { return a.dropMarks }) {
			q, args := b.WriteString(" SELECT 1").Query()
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return err
			}
		}
	}
	for _, a := range v.appends {
		at := a.at
		if a.unstorable { // lib/pq writes the time in its offset, which timestamptz refuses (22009)
			at = at.In(time.FixedZone("", 16*3600))
		}
		if err := tx.LeadEvent.Create().
			SetLeadID(a.lead.ID).SetTenantID(a.lead.TenantID).SetType("SelectionAttached").
			SetOccurredAt(at).SetPayload(json.RawMessage(`{}`)).Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

// probeContract is the probe's contract; a lead that does not exist is a
// RetryLater error with the given schedule.
func probeContract(schedule ...time.Duration) consumer.Batched[*probeView] {
	notFound := consumer.Code{Name: "PROBE_LEAD_NOT_FOUND", Class: consumer.RetryLater, Backoff: schedule}
	decide := func(ctx context.Context, v *probeView, m *consumer.Message) (consumer.Outcome, error) {
		p, err := consumer.DecodePayload[probePayload](m)
		if err != nil {
			return "", err
		}
		if strings.HasSuffix(p.Mode, "fields-panic") { // a bug in the service's outcome fields
			m.LogFields(func(*zerolog.Event) { panic("probe's log fields panic") })
		}
		switch p.Mode {
		case "invalid", "invalid-fields-panic":
			return "", m.Invalid("Mode invalid asked for")
		case "conflict":
			conflictRuns.Add(1)
			return "", probeConflict.Errorf("row version moved")
		case "panic":
			panic("probe panics")
		case "second-layer":
			return consumer.SkippedDuplicate, nil // the handler's own idempotency layer
		case "bug":
			return "", errors.New("an unexpected error (a bug)")
		case "flaky": // waits for its lead once (parked), then fails unexpectedly
			if _, again := flakySeen.LoadOrStore(m.MessageID, true); !again {
				return "", notFound.Errorf("lead %s not found (first run)", p.LeadID)
			}
			return "", errors.New("an unexpected error on re-drive (a bug)")
		case "slow":
			slowStarted.Store(m.MessageID, true)
			time.Sleep(slowFor)
		case "hold":
			if h, ok := holds.LoadAndDelete(m.MessageID); ok { // held on its first run only
				close(h.(hold).started)
				<-h.(hold).release
			}
		}
		l := v.leads[p.LeadID]
		if l == nil {
			return "", notFound.Errorf("lead %s not found", p.LeadID)
		}
		v.appends = append(v.appends, probeAppend{l, m.CreatedAt, p.Mode == "unstorable", p.Mode == "drop-marks"})
		return consumer.Applied, nil
	}
	return consumer.Batched[*probeView]{
		Read:   probeRead,
		Routes: []consumer.Route[*probeView]{{EventType: probeType, KeyPrefix: "probe:", Decide: decide}},
		Write:  probeWrite,
	}
}

// probeService builds the probe service (probeContract).
func probeService(schedule ...time.Duration) func(prometheus.Registerer) consumer.Service {
	return func(prometheus.Registerer) consumer.Service {
		return consumer.Service{
			Name: "probe", Topic: probeTopic, Group: probeGroup, DLQTopic: probeDLQ,
			ContractVersion: 1,
			InvalidCode:     probeInvalid,
			Handlers:        probeContract(schedule...),
		}
	}
}

// probeOf is the probe contract of a service probeService built.
func probeOf(svc consumer.Service) consumer.Batched[*probeView] {
	return svc.Handlers.(consumer.Batched[*probeView])
}

type env struct {
	t       *testing.T
	cluster *kafkatest.Cluster
	url     string
	db      *sql.DB
}

// newEnv is an env on the mock cluster.
func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, kafkatest.NewCluster)
}

// newEnvOn is an env on the cluster newCluster starts (a kafkatest.Broker's
// New, or a kfake cluster of a test's own).
func newEnvOn(t *testing.T, newCluster func(testing.TB, map[string]int) *kafkatest.Cluster) *env {
	t.Helper()
	cl := newCluster(t, map[string]int{probeTopic: 3, probeDLQ: 3})
	u := pgtest.NewDB(t)
	db, err := sql.Open("postgres", u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &env{t: t, cluster: cl, url: u, db: db}
}

// onEachBroker runs body as parallel subtests, one per kafkatest.Brokers,
// each with an env of its own on that broker.
func onEachBroker(t *testing.T, body func(t *testing.T, e *env)) {
	t.Helper()
	kafkatest.EachBroker(t, func(t *testing.T, b kafkatest.Broker) {
		t.Parallel()
		body(t, newEnvOn(t, b.New))
	})
}

// start runs the service build makes against the env's cluster and
// database, with the cluster's client settings under o.Kafka's.
func (e *env) start(build func(prometheus.Registerer) consumer.Service, o consumertest.Options) *consumertest.Running {
	e.t.Helper()
	km := e.cluster.ClientConfig()
	for k, v := range o.Kafka {
		km[k] = v
	}
	o.Kafka = km
	return consumertest.Start(e.t, e.cluster.Bootstrap, e.url, build, o)
}

// newMemberJoins returns a wait for the probe group's next new member's
// join to reach the coordinator as one the group counts in: the classic
// protocol's second JoinGroup, the first with the member id the first
// one's answer gave (KIP-394: till then the member is only pending), or
// KIP-848's heartbeat at epoch 0. On kfake, which can see it; elsewhere
// the wait returns at once. (The member that stays rejoins only after
// the new member's join began a rebalance, so the first JoinGroup with
// an id after one without is the new member's.)
func (e *env) newMemberJoins() (wait func()) {
	e.t.Helper()
	fc := e.cluster.Kfake()
	if fc == nil {
		return func() {}
	}
	var pending atomic.Bool // a JoinGroup without a member id came
	h := fc.Fault(kfake.Fault{
		Keys: []kmsg.Key{kmsg.JoinGroup, kmsg.ConsumerGroupHeartbeat}, Group: probeGroup, Observe: true, Count: -1,
		When: func(req kmsg.Request) bool {
			switch r := req.(type) {
			case *kmsg.JoinGroupRequest:
				if r.MemberID == "" {
					pending.Store(true)
					return false
				}
				return pending.Load()
			case *kmsg.ConsumerGroupHeartbeatRequest:
				return r.MemberEpoch == 0
			}
			return false
		},
	})
	return func() {
		e.t.Helper()
		defer h.Remove()
		waitHits(e.t, h, 1)
	}
}

// ready reports whether r's runtime is ready (/readyz), for Eventually.
func ready(r *consumertest.Running) func() bool { return allReady(r) }

// allReady reports whether every one of rs is ready, for Eventually.
func allReady(rs ...*consumertest.Running) func() bool {
	return func() bool {
		for _, r := range rs {
			if r.Runtime.Ready(context.Background()) != nil {
				return false
			}
		}
		return true
	}
}

func (e *env) lead() uuid.UUID {
	e.t.Helper()
	id := uuid.New()
	e.insertLead(id)
	return id
}

func (e *env) insertLead(id uuid.UUID) {
	e.t.Helper()
	_, err := e.db.Exec(`INSERT INTO leads (id, tenant_id, executor_agent_user_id, primary_investor_user_id, status)
		VALUES ($1, $2, $3, $4, 'Active')`, id, uuid.New(), uuid.New(), uuid.New())
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) count(q string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.db.QueryRow(q, args...).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// insertMark records a probe message as processed ('applied').
const insertMark = `INSERT INTO processed_messages (idempotency_key, consumer_group, topic, "partition", "offset", outcome) VALUES ($1, $2, $3, $4, $5, 'applied')`

// holdMark begins a transaction that holds id's mark, uncommitted: another
// processor of the message (a parked re-drive, a member that lost its
// assignment). The test commits it; a failed test rolls it back.
func (e *env) holdMark(id uuid.UUID, partition int32, offset int64) *sql.Tx {
	e.t.Helper()
	tx, err := e.db.Begin()
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = tx.Rollback() })
	if _, err := tx.Exec(insertMark,
		"probe:"+id.String(), probeGroup, probeTopic, partition, offset); err != nil {
		e.t.Fatal(err)
	}
	return tx
}

// awaitLockWait waits until a session of the test's database waits for a
// lock.
func (e *env) awaitLockWait(what string) {
	e.t.Helper()
	kafkatest.Eventually(e.t, 20*time.Second, func() bool {
		n, err := consumertest.LockWaiters(context.Background(), e.db, "%")
		if err != nil {
			e.t.Fatal(err)
		}
		return n > 0
	}, "%s", what)
}

// markProcessed records id as processed, as a committed batch leaves it.
func (e *env) markProcessed(id uuid.UUID, partition int32, offset int64) {
	e.t.Helper()
	if _, err := e.db.Exec(insertMark,
		"probe:"+id.String(), probeGroup, probeTopic, partition, offset); err != nil {
		e.t.Fatal(err)
	}
}

// applyProbe writes what the probe handler writes for one message of
// leadID, through db (a *sql.DB, or a *sql.Tx playing another processor).
func applyProbe(t *testing.T, db interface {
	Exec(string, ...any) (sql.Result, error)
}, leadID uuid.UUID) {
	t.Helper()
	if _, err := db.Exec(`INSERT INTO lead_events (lead_id, tenant_id, type, occurred_at, payload) SELECT id, tenant_id, 'SelectionAttached', now(), '{}' FROM leads WHERE id = $1`, leadID); err != nil {
		t.Fatal(err)
	}
}

func (e *env) events(leadID uuid.UUID) int {
	return e.count(`SELECT count(*) FROM lead_events WHERE lead_id = $1`, leadID)
}

// envelope is a probe event for lead with mode, returned with its MessageId.
func envelope(leadID uuid.UUID, mode string) (uuid.UUID, []byte) {
	id := uuid.New()
	b, _ := json.Marshal(map[string]any{
		"MessageId": id, "EventType": probeType, "ContractVersion": 1,
		"CreatedAt": time.Now().UTC().Format(time.RFC3339Nano), "AggregateId": leadID, "AggregateType": "Lead",
		"Payload": map[string]any{"LeadId": leadID, "Mode": mode},
	})
	return id, b
}

func (e *env) produce(partition int32, value []byte) {
	e.t.Helper()
	e.cluster.Produce(e.t, probeTopic, kafkatest.Message{Partition: partition, Key: []byte(uuid.NewString()), Value: value})
}

// committed sums the group's committed offsets over the partitions.
func (e *env) committed() int64 {
	var n int64
	for _, o := range e.cluster.Committed(e.t, probeGroup, probeTopic) {
		n += o
	}
	return n
}

func (e *env) waitCommitted(n int64) {
	e.t.Helper()
	var have map[int32]int64
	kafkatest.Eventually(e.t, 30*time.Second, func() bool {
		have = e.cluster.Committed(e.t, probeGroup, probeTopic)
		var sum int64
		for _, o := range have {
			sum += o
		}
		return sum == n
	}, "committed offsets to reach %d in all (have %v)", n, lazy(func() any { return have }))
}

// lazy formats as what its function returns when it is formatted.
type lazy func() any

func (l lazy) String() string { return fmt.Sprint(l()) }

// proxy is a TCP proxy to PostgreSQL that a test can cut and restore: the
// database "goes away" for the runtime only.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	up     bool
	conns  []net.Conn
}

func newProxy(t *testing.T, dbURL string) (*proxy, string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: u.Host, up: true}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.cut() })
	u.Host = ln.Addr().String()
	return p, u.String()
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		up := p.up
		p.mu.Unlock()
		if !up {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); s.Close() }()
		go func() { _, _ = io.Copy(c, s); c.Close() }()
	}
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up = false
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *proxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up = true
}

// logWatch is a log writer that sets seen once a line holding match is
// written, before it passes the line on to w.
type logWatch struct {
	w     io.Writer
	match string
	seen  *atomic.Bool
	line  func(map[string]any) // when set, gets every line, decoded
}

func (l logWatch) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(l.match)) {
		l.seen.Store(true)
	}
	if l.line != nil {
		var m map[string]any
		if json.Unmarshal(p, &m) == nil {
			l.line(m)
		}
	}
	return l.w.Write(p)
}

// watchedLogger is a console logger (as consumertest's, at info) that sets
// seen once a line holding match is logged.
func watchedLogger(match string, seen *atomic.Bool) *zerolog.Logger {
	return recordingLogger(match, seen, nil)
}

// recordingLogger is watchedLogger that also hands every line, decoded,
// to line.
func recordingLogger(match string, seen *atomic.Bool, line func(map[string]any)) *zerolog.Logger {
	l := zerolog.New(logWatch{zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true}, match, seen, line}).
		Level(zerolog.InfoLevel).With().Timestamp().Logger()
	return &l
}

// refusedCommits are the probe group's offset commits a kfake cluster
// refuses while a condition holds.
type refusedCommits struct {
	handle *kfake.FaultHandle
	mu     sync.Mutex
	max    map[int32]int64 // per partition, the highest offset a refused commit carried
}

// refuseCommits makes fc refuse the probe group's offset commits while
// refuse() holds, with OFFSET_METADATA_TOO_LARGE: librdkafka takes it as
// final (no retry, no coordinator look-up), so each refused request is one
// failed Commit.
func refuseCommits(fc *kfake.Cluster, refuse func() bool) *refusedCommits {
	r := &refusedCommits{max: map[int32]int64{}}
	r.handle = fc.Fault(kfake.Fault{
		Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: probeGroup, Err: kerr.OffsetMetadataTooLarge, Count: -1,
		When: func(req kmsg.Request) bool {
			if !refuse() {
				return false
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			for _, t := range req.(*kmsg.OffsetCommitRequest).Topics {
				for _, p := range t.Partitions {
					r.max[p.Partition] = max(r.max[p.Partition], p.Offset)
				}
			}
			return true
		},
	})
	return r
}

// carried sums over the partitions the highest offset a refused commit
// carried.
func (r *refusedCommits) carried() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, o := range r.max {
		n += o
	}
	return n
}
