package consumer

import (
	"container/list"
	"context"
	"crypto/rand"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"hash/maphash"
	"math"
	"reflect"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/lib/pq"
	"github.com/prometheus/client_golang/prometheus"
)

// The statement cache: each connection of the pool keeps the statements it
// ran last prepared on the server (DATABASE_STATEMENT_CACHE of them, least
// recently used evicted), as pgx does by default. A statement with
// arguments then costs PostgreSQL a Bind and an Execute, not a Parse, an
// analysis (its plan is still made for the arguments: BeginTx): in a
// profile of rewards under load parsing, analysing and planning were a
// third of PostgreSQL's CPU (bench/README.md, "Earlier findings").
// A statement without arguments (BEGIN, COMMIT, a plain query) still goes
// through the simple protocol, and a statement is prepared only the second
// time its connection sees it: a text seen once (a statement built for
// one occasion) is likely never seen again; preparing it would cost a
// round trip, and a second one to evict it later. The services'
// statements have one text whatever the batch's size (setsql.go).
//
// PostgreSQL re-plans a prepared statement by itself when a table it uses
// changes. The one change it refuses is a new result type ("cached plan
// must not change result type", a column's type altered under a running
// consumer): that statement fails once, every connection drops its
// prepared statements (DEALLOCATE ALL before its next one), and the error
// counts as an infrastructure one (infraCause), so the message is
// retried, not dead-lettered.
//
// Behind a pooler in transaction mode (PgBouncer before 1.22, or without
// max_prepared_statements) a server connection's prepared statements are
// not the client's: a client's next transaction may run on a server
// connection where its statement is missing, or where another client
// prepared one under the same name. lib/pq names statements "1", "2", …
// on every connection, and lets no caller choose the name, so each
// connection starts lib/pq's counter (namei, the one field of lib/pq the
// consumers touch: seedNames) at a number of its own: the names of one
// process never meet (a range of nameBudget numbers per connection, from
// a process-wide sequence), another process's only by chance (a random
// 62-bit base: about K·2⁻⁴¹ for two processes that opened K connections
// each), and they are negative, where lib/pq's own counter (other programs
// behind the same pooler) never goes. Setting the field is safe: it is an
// int that only gname reads and increments, on the connection's own
// goroutine, and it is set once, before the connection's first statement. A
// statement then runs under its own name or fails: 26000 (missing), never
// another client's SQL with this message's arguments. That failure, and
// 42P05 or a Bind refused for its parameter count, is the world's
// (statementLost, infraCause "pooler"): the message is retried, the pool
// stops preparing for good (every connection runs unprepared from its
// next statement on) and says so in one warning. When seedNames cannot
// find the counter (a lib/pq that changed), the pool prepares nothing.

// stmtCache is one connection's prepared statements. A driver.Conn is used
// by one goroutine at a time, so it needs no lock.
type stmtCache struct {
	max   int
	lru   *list.List // of *cachedStmt, most recently used first
	byKey map[stmtKey]*list.Element
	seen  map[uint64]struct{} // first hashes (stmtKey[0]) of texts seen before, prepared ones included (cleared when it reaches seenBound×max)
	seeds [2]maphash.Seed
	gen   uint64 // the shared generation its statements belong to
	open  bool   // rows not closed yet
	m     *stmtMetrics
	epoch *atomic.Uint64 // the pool's generation, raised on a result-type change
	pool  *jsonAsText    // its off switch (a pooler's sign seen)
}

type cachedStmt struct {
	key stmtKey
	st  driver.Stmt
}

// stmtKey names a statement's text by two seeded 64-bit hashes: the cache
// does not keep the texts (a statement built for one occasion may run to
// kilobytes, on every connection: most of what the cache would hold). Two
// texts share a key with a probability of about n²/2¹²⁹ for n texts; the
// texts are the consumers' own SQL, never data.
type stmtKey [2]uint64

func (sc *stmtCache) key(query string) stmtKey {
	return stmtKey{maphash.String(sc.seeds[0], query), maphash.String(sc.seeds[1], query)}
}

// stmtMetrics are the pool's statement cache counters.
type stmtMetrics struct {
	hits, misses, firsts, evictions, resets prometheus.Counter
}

func newStmtMetrics(reg prometheus.Registerer) *stmtMetrics {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pin_consumer_db_statement_cache_total",
		Help: "Statements with arguments by what the connection's statement cache did: hit (ran prepared), miss (prepared now: seen before), first (seen the first time: run unprepared), evicted (closed to make room), reset (every statement dropped after a result-type change).",
	}, []string{"result"})
	if reg != nil {
		reg.MustRegister(c)
	}
	return &stmtMetrics{
		hits: c.WithLabelValues("hit"), misses: c.WithLabelValues("miss"), firsts: c.WithLabelValues("first"),
		evictions: c.WithLabelValues("evicted"), resets: c.WithLabelValues("reset"),
	}
}

// errQueryInProgress is lib/pq's answer to a statement sent while the rows
// of the last one are still open. Its own check does not see the rows of a
// prepared statement, and its prepared path does not check at all, so with
// a cache the connection tracks open rows itself (stmtCache.open).
var errQueryInProgress = errors.New("pq: there is already a query being processed on this connection")

// seenBound bounds stmtCache.seen, in multiples of the cache's size.
const seenBound = 2

// stmt returns the prepared statement for query, preparing it (and
// evicting the least recently used one) when the connection has none but
// has seen the text before; nil (run it unprepared) the first time.
func (c *textJSONConn) stmt(ctx context.Context, query string) (driver.Stmt, error) {
	sc := c.cache
	if sc.pool.off.Load() {
		return nil, nil
	}
	if g := sc.epoch.Load(); g != sc.gen {
		// A result type changed somewhere: drop everything this
		// connection prepared. Not transactional, so fine inside one.
		if sc.lru.Len() > 0 {
			if _, err := c.pc.ExecContext(ctx, "DEALLOCATE ALL", nil); err != nil {
				return nil, err
			}
			sc.lru.Init()
			clear(sc.byKey)
		}
		sc.gen = g
	}
	k := sc.key(query)
	if e, ok := sc.byKey[k]; ok {
		sc.lru.MoveToFront(e)
		sc.m.hits.Inc()
		return e.Value.(*cachedStmt).st, nil
	}
	if _, ok := sc.seen[k[0]]; !ok {
		if len(sc.seen) >= seenBound*sc.max {
			clear(sc.seen)
		}
		sc.seen[k[0]] = struct{}{}
		sc.m.firsts.Inc()
		return nil, nil
	}
	if sc.lru.Len() >= sc.max {
		e := sc.lru.Back()
		cs := e.Value.(*cachedStmt)
		if err := cs.st.Close(); err != nil {
			return nil, err
		}
		sc.lru.Remove(e)
		delete(sc.byKey, cs.key)
		sc.m.evictions.Inc()
	}
	if c.names >= nameBudget { // this connection's names are spent: IsValid retires it
		return nil, nil
	}
	c.names++
	st, err := c.pc.PrepareContext(ctx, query)
	if err != nil {
		return nil, c.failed(err)
	}
	sc.byKey[k] = sc.lru.PushFront(&cachedStmt{k, st})
	sc.m.misses.Inc()
	return st, nil
}

// resultTypeChanged reports PostgreSQL's refusal to run a prepared
// statement whose result columns changed type since it was prepared
// ("cached plan must not change result type"). The message is translated
// with lc_messages; the routine that raises it is not (pgjdbc and
// postgres.js match it the same way).
func resultTypeChanged(err error) bool {
	var pqErr *pq.Error
	return errors.As(err, &pqErr) && pqErr.Code == "0A000" && pqErr.Routine == "RevalidateCachedQuery"
}

// statementLost reports PostgreSQL's answer to a statement name the
// server connection does not hold as the client prepared it: 26000 (no
// such prepared statement), 42P05 (the name is taken) or a Bind refused
// for its parameter count (08P01) of a named statement. Behind a pooler
// in transaction mode each is the pooler's doing; the consumers' SQL
// never names a statement itself.
func statementLost(e *pq.Error) bool {
	switch e.Code {
	case "26000", "42P05":
		return true
	case "08P01":
		return strings.HasPrefix(e.Message, "bind message supplies") && !strings.Contains(e.Message, `prepared statement "" `)
	}
	return false
}

// failed drops the pool's prepared statements after a result-type change,
// and stops the pool preparing at a sign of a pooler.
func (c *textJSONConn) failed(err error) error {
	if resultTypeChanged(err) {
		c.cache.epoch.Add(1)
		c.cache.m.resets.Inc()
	}
	var pqErr *pq.Error
	if errors.As(err, &pqErr) && statementLost(pqErr) {
		c.cache.pool.poolerSeen(pqErr)
	}
	return err
}

// nameBudget is how many statement names a connection may use (lib/pq's
// counter from its seed on): then it is retired (IsValid), so its names
// never reach the next connection's range.
const nameBudget = 1 << 20

// nameSpace are the seeds the process gives its connections: a random
// base, and a sequence number each connection takes (nameSeed).
var nameSpace struct {
	base uint64
	seq  atomic.Uint64
}

func init() {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	nameSpace.base = binary.LittleEndian.Uint64(b[:])
}

// nameSeed is the start of the next connection's names: a range of
// nameBudget numbers in [-2⁶³, -2⁶²+nameBudget), the ranges of one
// process apart for 2⁴² connections.
func nameSeed() int64 {
	k := nameSpace.seq.Add(1)
	u := (nameSpace.base + k*nameBudget) & (1<<62 - 1)
	return math.MinInt64 + int64(u)
}

// seedNames starts lib/pq's statement name counter of c at seed, and
// reports whether it could. lib/pq (v1.12.3, conn.go) names each statement
// strconv.FormatInt(namei+1) and keeps namei nowhere else; nothing of it is
// exported, so the field is found by name and type (reflect) and set before
// c's first statement, while no other goroutine holds c. A lib/pq without
// it leaves the pool without a cache (TestStatementNamesAreUniquePerConnection
// says so first).
func seedNames(c driver.Conn, seed int64) bool {
	v := reflect.ValueOf(c)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct || v.Type().Elem().PkgPath() != "github.com/lib/pq" {
		return false
	}
	f := v.Elem().FieldByName("namei")
	if !f.IsValid() || f.Kind() != reflect.Int || f.Type().Size() != 8 || !f.CanAddr() {
		return false
	}
	*(*int)(unsafe.Pointer(f.UnsafeAddr())) = int(seed)
	return true
}

func (c *textJSONConn) cachedQuery(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	st, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	var rows driver.Rows
	if st == nil {
		rows, err = c.pc.QueryContext(ctx, query, args)
	} else {
		rows, err = st.(driver.StmtQueryContext).QueryContext(ctx, args)
	}
	if err != nil {
		return nil, c.failed(err)
	}
	return c.tracked(rows)
}

// tracked marks the connection busy until rows are closed.
func (c *textJSONConn) tracked(rows driver.Rows) (driver.Rows, error) {
	pr, ok := rows.(pqRows)
	if !ok { // a lib/pq whose rows lack one of them: a build problem
		_ = rows.Close()
		return nil, errors.New("lib/pq rows lack an interface the consumers rely on")
	}
	c.cache.open = true
	return &cachedRows{pqRows: pr, c: c.cache}, nil
}

func (c *textJSONConn) cachedExec(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	st, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return c.pc.ExecContext(ctx, query, args)
	}
	res, err := st.(driver.StmtExecContext).ExecContext(ctx, args)
	if err != nil {
		return nil, c.failed(err)
	}
	return res, nil
}

// pqRows is what lib/pq's rows implement; database/sql looks for each of
// these interfaces on the rows it is given.
type pqRows interface {
	driver.Rows
	driver.RowsNextResultSet
	driver.RowsColumnTypeScanType
	driver.RowsColumnTypeDatabaseTypeName
	driver.RowsColumnTypeLength
	driver.RowsColumnTypePrecisionScale
}

// cachedRows are rows of a connection with a cache: closing them lets the
// connection send its next statement.
type cachedRows struct {
	pqRows
	c *stmtCache
}

func (r *cachedRows) Close() error {
	r.c.open = false
	return r.pqRows.Close()
}
