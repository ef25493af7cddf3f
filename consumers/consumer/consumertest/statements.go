package consumertest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/pin-platform/pin/ent"
)

// Statements records the SQL an ent client sends (its text, without the
// arguments), for a test of what a service's Read or Write sends: how
// many statements, and which.
type Statements struct {
	mu   sync.Mutex
	on   bool
	sent []string
}

// NewStatementsClient returns an ent client on db whose statements st
// records while it is started.
func NewStatementsClient(db *sql.DB) (*ent.Client, *Statements) {
	st := &Statements{}
	drv := dialect.DebugWithContext(entsql.OpenDB(dialect.Postgres, db), func(_ context.Context, v ...any) {
		// ent's debug line: "<who>.<Exec|Query>: query=<text> args=[…]".
		line := fmt.Sprint(v...)
		_, q, ok := strings.Cut(line, "query=")
		if !ok {
			return // Tx begin, commit, rollback
		}
		q, _, _ = strings.Cut(q, " args=")
		st.mu.Lock()
		defer st.mu.Unlock()
		if st.on {
			st.sent = append(st.sent, q)
		}
	})
	return ent.NewClient(ent.Driver(drv)), st
}

// Start forgets what was recorded and records from now on.
func (st *Statements) Start() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.on, st.sent = true, nil
}

// Stop stops recording and returns the statements sent since Start.
func (st *Statements) Stop() []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.on = false
	return st.sent
}
