package consumer

import (
	"bytes"
	"database/sql/driver"
	"slices"
	"strconv"
	"strings"
	"time"

	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/sql"
	"github.com/google/uuid"

	"github.com/pin-platform/pin/schema"
)

// Set-based statements. A transaction reads and writes the rows of all its
// messages at once, and every such statement has one text whatever the
// number of rows: each column's values travel as one array parameter
// (`= ANY($1::uuid[])`, `INSERT … SELECT … FROM unnest($1::uuid[], …)`,
// `UPDATE … FROM unnest(…)`), never as an IN list or VALUES rows of one
// parameter each. One text is what the statement cache keeps prepared
// (stmtcache.go), and what PostgreSQL plans once, where a text per batch
// size was parsed and planned on nearly every transaction of a backlog
// (bench/README.md, "Fixed statement texts"). The arrays also lift the
// protocol's bound of 65,535 parameters a statement: a statement carries a
// handful, so no batch is cut into chunks.

// Array is one column's values for a set-based statement, written as
// PostgreSQL's array literal ('{"a","b",NULL}'): the text form every
// element type reads, cast by the statement ($1::uuid[]). The zero value
// is an empty array.
type Array struct {
	b []byte // '{' and the elements so far, comma-separated
	n int
}

func (a *Array) next() {
	if a.n == 0 {
		a.b = append(a.b[:0], '{')
	} else {
		a.b = append(a.b, ',')
	}
	a.n++
}

// Text adds s, quoted.
func (a *Array) Text(s string) {
	a.next()
	a.b = append(a.b, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			a.b = append(a.b, '\\')
		}
		a.b = append(a.b, s[i])
	}
	a.b = append(a.b, '"')
}

// Null adds NULL.
func (a *Array) Null() {
	a.next()
	a.b = append(a.b, "NULL"...)
}

// UUID adds id.
func (a *Array) UUID(id uuid.UUID) {
	a.next()
	var s [36]byte
	a.b = append(a.b, s[:encodeUUID(s[:], id)]...)
}

// UUIDs adds one element holding the array ids ('{"{…,…}"}'), for a
// column of type uuid[]: the statement casts it (Column.Cast).
func (a *Array) UUIDs(ids []uuid.UUID) {
	var in Array
	for _, id := range ids {
		in.UUID(id)
	}
	v, _ := in.Value()
	a.Text(v.(string))
}

// Int adds n.
func (a *Array) Int(n int64) {
	a.next()
	a.b = strconv.AppendInt(a.b, n, 10)
}

// Time adds t, to the nanosecond (PostgreSQL rounds it to its
// microsecond, as it does a timestamp parameter).
func (a *Array) Time(t time.Time) {
	a.next()
	a.b = append(a.b, '"')
	a.b = t.AppendFormat(a.b, "2006-01-02T15:04:05.999999999Z07:00")
	a.b = append(a.b, '"')
}

// Len is the number of elements added.
func (a *Array) Len() int { return a.n }

// Value implements driver.Valuer.
func (a *Array) Value() (driver.Value, error) {
	if a.n == 0 {
		return "{}", nil
	}
	return string(a.b) + "}", nil
}

func encodeUUID(dst []byte, id uuid.UUID) int {
	const hex = "0123456789abcdef"
	j := 0
	for i, c := range id {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst[j] = '-'
			j++
		}
		dst[j], dst[j+1] = hex[c>>4], hex[c&0xf]
		j += 2
	}
	return j
}

// UUIDArray is the array of ids.
func UUIDArray(ids []uuid.UUID) *Array {
	a := &Array{b: make([]byte, 0, 1+37*len(ids))}
	for _, id := range ids {
		a.UUID(id)
	}
	return a
}

// AnyOf is the predicate `column = ANY($n::typ[])`, for an ent query's
// Where: the rows whose column is one of values.
func AnyOf(column, typ string, values *Array) func(*sql.Selector) {
	return func(s *sql.Selector) {
		s.Where(sql.P(func(b *sql.Builder) {
			b.Ident(s.C(column)).WriteString(" = ANY(").Arg(values).WriteString("::" + typ + "[])")
		}))
	}
}

// Column is one column of a set-based statement: its values, one per
// row, in one array.
type Column struct {
	Name   string // the table's column
	Type   string // the SQL type of the array's elements: uuid, text, bigint, timestamptz, …
	Cast   string // the element's cast where the column is not of Type (uuid[] sent as text); "" for none
	Values *Array
}

// Unnest writes `unnest($1::t1[], $2::t2[], …) AS u("c1", "c2", …)`:
// the rows of cols, as a FROM item.
func Unnest(b *sql.Builder, cols []Column) {
	b.WriteString("unnest(")
	for i, c := range cols {
		if i > 0 {
			b.Comma()
		}
		b.Arg(c.Values).WriteString("::" + c.Type + "[]")
	}
	b.WriteString(") AS u(")
	for i, c := range cols {
		if i > 0 {
			b.Comma()
		}
		b.Ident(c.Name)
	}
	b.WriteByte(')')
}

// InsertRows is the statement
//
//	INSERT INTO table ("c1", "c2", …) SELECT u."c1", u."c2"::cast, … FROM unnest(…) AS u(…) tail
//
// that inserts the rows of cols (the columns hold as many values each);
// tail is what follows (ON CONFLICT …, RETURNING …), argument-free.
func InsertRows(table string, cols []Column, tail string) (string, []any) {
	var b sql.Builder
	b.SetDialect(dialect.Postgres)
	b.WriteString("INSERT INTO ").Ident(table).WriteString(" (")
	for i, c := range cols {
		if i > 0 {
			b.Comma()
		}
		b.Ident(c.Name)
	}
	b.WriteString(") SELECT ")
	for i, c := range cols {
		if i > 0 {
			b.Comma()
		}
		b.WriteString("u.").Ident(c.Name)
		if c.Cast != "" {
			b.WriteString("::" + c.Cast)
		}
	}
	b.WriteString(" FROM ")
	Unnest(&b, cols)
	if tail != "" {
		b.WriteString(" " + strings.TrimSpace(tail))
	}
	return b.Query()
}

// SortedIDs returns the keys of m in byte order: the order in which a batch
// locks and writes its rows, the same in every batch, so that two batches
// touching the same rows wait for each other instead of deadlocking.
func SortedIDs[V any](m map[uuid.UUID]V) []uuid.UUID {
	ids := make([]uuid.UUID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	return ids
}

// NewRowID is the primary key of a row a transaction inserts, as ent's
// default for every id column (schema.NewRowID): a version 7 UUID, whose
// leading 48 bits are the time in milliseconds, so that the rows land at
// the right edge of their primary key's index (a page that is in memory
// and in cache, split once as it fills) instead of on a random leaf of it,
// as version 4's did, each a page to find, dirty and write whole to the
// WAL after a checkpoint.
func NewRowID() uuid.UUID { return schema.NewRowID() }
