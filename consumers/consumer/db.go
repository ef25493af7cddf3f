package consumer

import (
	"container/list"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/lib/pq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// DBOptions are the pool's settings beyond DATABASE_URL.
type DBOptions struct {
	// StatementCache is how many statements each connection keeps
	// prepared (DATABASE_STATEMENT_CACHE; 0: none, every statement is
	// parsed and planned anew). See stmtcache.go.
	StatementCache int
	// Metrics, when set, gets the statement cache's counters.
	Metrics prometheus.Registerer
	// Logger, when set, gets the one warning of a pooler that loses
	// prepared statements (stmtcache.go).
	Logger *zerolog.Logger
}

// DefaultStatementCache is DATABASE_STATEMENT_CACHE's default: far more
// than the dozen texts a consumer runs again (setsql.go: one per
// statement, whatever the batch's size), so that a service with more, or
// a text per size that a future statement brings back, still finds them
// prepared.
const DefaultStatementCache = 512

// OpenDB opens the consumers' PostgreSQL pool for dsn (DATABASE_URL).
//
// Unless dsn sets binary_parameters itself (a pg_service.conf entry does
// not count), lib/pq's binary_parameters is turned on: a statement with arguments then costs one round trip to the
// server (Parse, Bind, Describe, Execute, Sync sent together) instead of two
// (Parse, Describe, Sync; then Bind, Execute, Sync). Every statement of a
// batch waits for its answer, so on a busy machine this halves the waits of
// a transaction.
//
// In that mode lib/pq sends []byte arguments in PostgreSQL's binary format,
// which is right for bytea (parked_messages.key and value) but not for
// jsonb, whose binary format starts with a version byte. ent passes every
// JSON field (lead_events.payload, parked_messages.headers) as a
// json.RawMessage, so the pool's connections send json.RawMessage as text,
// which PostgreSQL parses as JSON whatever the column's type.
//
// Prepared statements answer in text like unnamed ones
// (disable_prepared_binary_result): what a column scans into does not
// depend on whether its statement was cached.
func OpenDB(dsn string, o DBOptions) (*sql.DB, error) {
	if o.StatementCache < 0 {
		return nil, fmt.Errorf("statement cache %d < 0", o.StatementCache)
	}
	cfg, err := pq.NewConfig(dsn)
	if err != nil {
		return nil, err
	}
	if !setsBinaryParameters(dsn) {
		cfg.BinaryParameters = true
	}
	cfg.DisablePreparedBinaryResult = true
	c, err := pq.NewConnectorConfig(cfg)
	if err != nil {
		return nil, err
	}
	j := &jsonAsText{c: c, binary: cfg.BinaryParameters, cache: o.StatementCache, seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, log: zerolog.Nop()}
	if o.Logger != nil {
		j.log = *o.Logger
	}
	if j.cache > 0 {
		j.m = newStmtMetrics(o.Metrics)
	}
	return sql.OpenDB(j), nil
}

// setsBinaryParameters reports whether dsn, a URL or a key=value string,
// has a binary_parameters key (not merely the text, say in a password).
func setsBinaryParameters(dsn string) bool {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		return err == nil && u.Query().Has("binary_parameters")
	}
	return kvBinaryParameters.MatchString(dsn)
}

var kvBinaryParameters = regexp.MustCompile(`(^|\s)binary_parameters\s*=`)

// jsonAsText is a connector whose connections send json.RawMessage
// arguments as text and keep a statement cache of cache statements.
type jsonAsText struct {
	c      driver.Connector
	binary bool // lib/pq's binary_parameters: []byte arguments go in binary
	cache  int
	m      *stmtMetrics
	epoch  atomic.Uint64 // see stmtCache.epoch
	seeds  [2]maphash.Seed
	off    atomic.Bool // a pooler lost a statement: prepare nothing more
	log    zerolog.Logger
	once   sync.Once
	// unnamed: the warning of a lib/pq whose names cannot be seeded
	unnamed sync.Once
}

// poolerSeen turns the pool's statement cache off, saying why once.
func (j *jsonAsText) poolerSeen(e *pq.Error) {
	j.off.Store(true)
	j.once.Do(func() {
		j.log.Warn().Str("sqlstate", string(e.Code)).Str("error", e.Message).
			Msg("a prepared statement is missing or not this connection's on the server: most likely a pooler in transaction mode (PgBouncer before 1.22, or without max_prepared_statements) between the consumer and PostgreSQL; the statement cache is off for this process from now on, the message is retried; set DATABASE_STATEMENT_CACHE=0 to start without it")
	})
}

func (j *jsonAsText) Connect(ctx context.Context) (driver.Conn, error) {
	c, err := j.c.Connect(ctx)
	if err != nil {
		return nil, err
	}
	pc, ok := c.(pqConn)
	if !ok { // a lib/pq without one of them: a build problem, not the server's
		_ = c.Close()
		return nil, fmt.Errorf("lib/pq connection %T lacks an interface the consumers rely on", c)
	}
	tc := &textJSONConn{Conn: c, pc: pc, binary: j.binary}
	tc.named = seedNames(c, nameSeed())
	if !tc.named && j.cache > 0 { // lib/pq's own names: prepare nothing (stmtcache.go)
		j.unnamed.Do(func() {
			j.log.Warn().Msg("lib/pq's statement names cannot be made this connection's own: the statement cache is off")
		})
	}
	if j.cache > 0 && tc.named {
		tc.cache = &stmtCache{max: j.cache, lru: list.New(), byKey: map[stmtKey]*list.Element{},
			seen: map[uint64]struct{}{}, seeds: j.seeds, m: j.m, epoch: &j.epoch, gen: j.epoch.Load(), pool: j}
	}
	return tc, nil
}

func (j *jsonAsText) Driver() driver.Driver { return j.c.Driver() }

// textJSONConn is a lib/pq connection with its own CheckNamedValue. It
// forwards every optional interface lib/pq implements; database/sql would
// otherwise fall back to slower paths (prepared statements for every query).
type textJSONConn struct {
	driver.Conn
	pc     pqConn
	binary bool       // lib/pq sends []byte arguments in binary (binary_parameters)
	cache  *stmtCache // nil: DATABASE_STATEMENT_CACHE=0
	named  bool       // lib/pq's name counter seeded (seedNames)
	names  int        // statement names used of its nameBudget
}

// pqConn is what lib/pq's connection implements beyond driver.Conn.
type pqConn interface {
	driver.ConnBeginTx
	driver.Tx // its BeginTx returns the connection itself
	driver.ConnPrepareContext
	driver.QueryerContext
	driver.ExecerContext
	driver.NamedValueChecker
	driver.SessionResetter
	driver.Validator
	driver.Pinger
}

// CheckNamedValue sends json.RawMessage as text, an Array in binary where
// it can (setsql.go), and leaves everything else to lib/pq.
func (c *textJSONConn) CheckNamedValue(nv *driver.NamedValue) error {
	switch v := nv.Value.(type) {
	case *Array:
		v.sent = true
		if c.binary {
			if b, ok := v.binary(); ok {
				nv.Value = b
				return nil
			}
		}
		nv.Value = v.text()
		return nil
	case json.RawMessage:
		if v == nil {
			nv.Value = nil
		} else {
			nv.Value = string(v)
		}
		return nil
	case *json.RawMessage:
		if v == nil || *v == nil {
			nv.Value = nil
		} else {
			nv.Value = string(*v)
		}
		return nil
	}
	return c.pc.CheckNamedValue(nv)
}

// PlanSettings are the planner settings of every transaction of messages
// (BeginTx below): its prepared statements run the plan made once per
// connection, and its plans read tables by index. Tests of a statement's
// plan run it under them.
const PlanSettings = "SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_seqscan = off"

// beginPlans begins a transaction as lib/pq does (READ WRITE: a standby
// refuses it at once) under PlanSettings.
const beginPlans = "BEGIN READ WRITE; " + PlanSettings

// BeginTx begins a transaction. With the statement cache on, it sets two
// planner settings in the BEGIN's own round trip, for the transaction
// only (no pooler's server connection keeps them):
//   - plan_cache_mode = force_generic_plan: a prepared statement is
//     planned once per connection, not at every execution. The
//     statements are fixed texts over arrays (setsql.go) whose length the
//     generic plan does not know; planning one for its arguments took
//     0.1–0.5 ms, as long as running it.
//   - enable_seqscan = off: every statement of a transaction of messages
//     looks rows up by the keys its batch holds, for which an index
//     exists. A plan made while a table was empty or small (a fresh
//     replica filling from the topic's start, before autovacuum's first
//     ANALYZE) would otherwise be a sequential scan, kept as the table
//     grows (bench/README.md, "Fixed statement texts"); custom plans chose
//     such scans too, on the estimates of tables not yet analyzed.
//     (Turning hash and merge joins off as well made it worse: with no
//     statistics the planner then materialised a whole index scan into a
//     nested loop.)
func (c *textJSONConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if c.cache == nil || opts != (driver.TxOptions{}) {
		return c.pc.BeginTx(ctx, opts)
	}
	if _, err := c.pc.ExecContext(ctx, beginPlans, nil); err != nil {
		// A BEGIN that ran before the SET failed leaves the connection in
		// a failed transaction: end it, or lib/pq's next BEGIN refuses.
		_, _ = c.pc.ExecContext(context.WithoutCancel(ctx), "ROLLBACK", nil)
		return nil, err
	}
	return c.pc, nil // lib/pq's connection is its own transaction, as its BeginTx returns
}

func (c *textJSONConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if c.named && c.names >= nameBudget { // database/sql tries again on another connection
		return nil, driver.ErrBadConn
	}
	c.names++
	return c.pc.PrepareContext(ctx, query)
}

func (c *textJSONConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if c.cache != nil {
		if c.cache.open {
			return nil, errQueryInProgress
		}
		if len(args) > 0 {
			return c.cachedQuery(ctx, query, args)
		}
		rows, err := c.pc.QueryContext(ctx, query, args)
		if err != nil {
			return nil, err
		}
		return c.tracked(rows)
	}
	return c.pc.QueryContext(ctx, query, args)
}

func (c *textJSONConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if c.cache != nil {
		if c.cache.open {
			return nil, errQueryInProgress
		}
		if len(args) > 0 {
			return c.cachedExec(ctx, query, args)
		}
	}
	return c.pc.ExecContext(ctx, query, args)
}

func (c *textJSONConn) ResetSession(ctx context.Context) error {
	if c.cache != nil && c.cache.open { // rows database/sql did not close: never seen, but not reusable
		return driver.ErrBadConn
	}
	return c.pc.ResetSession(ctx)
}

// IsValid retires a connection whose statement names are spent.
func (c *textJSONConn) IsValid() bool { return c.pc.IsValid() && (!c.named || c.names < nameBudget) }

func (c *textJSONConn) Ping(ctx context.Context) error { return c.pc.Ping(ctx) }
