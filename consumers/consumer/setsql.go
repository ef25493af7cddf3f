package consumer

import (
	"bytes"
	"database/sql/driver"
	"encoding/binary"
	"math"
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

// Array is one column's values for a set-based statement. It is sent in
// PostgreSQL's binary array format where the connection sends binary
// parameters (lib/pq's binary_parameters, on unless DATABASE_URL turns it
// off: OpenDB) and its elements have one type the statement's cast names;
// else as the array literal ('{"a","b",NULL}'), the text form every element
// type reads, cast by the statement ($1::uuid[]). The two read the same:
// the binary form spares the server parsing every element's text (uuid_in,
// timestamptz_in, int8in), a sixth of its CPU per event in the set-based
// statements (bench/README.md, "Issue 28, session 5": arrays in binary).
// The zero value is an empty array.
//
// The statement's cast is the elements' type: UUID → uuid, Text → text
// (or jsonb where Unnest's column says so), Int → bigint, Time →
// timestamptz. An array of mixed elements, or of a type its statement's
// cast does not name, goes as text; so does one with a time PostgreSQL
// would refuse to read as text (pgReadsAsText), so that the refusal is
// the server's as before. A raw statement that names no cast through
// Unnest or AnyOf takes the binary form whenever the elements are of one
// kind: its cast must then be the kind's type above ($1::bigint[] for
// Int, not $1::int[], which the binary form of int8 elements does not
// read).
type Array struct {
	n    int
	sent bool // handed to the driver for a statement (Marks checks its insert went)
	// bin is the binary form: binHeader bytes left for the header, then
	// each element's length (-1: NULL) and bytes. The text form is
	// rendered from it when asked for (text), except once the elements
	// are mixed: then txt holds it, built as they come.
	bin   []byte
	txt   []byte // the elements' text, comma-separated, while kind is kindText0
	kind  elemKind
	nulls bool
	typ   string // the SQL type the statement casts the array to, where Unnest or AnyOf wrote it
}

// elemKind is the type of an Array's elements.
type elemKind uint8

const (
	kindNone elemKind = iota // only NULLs, or nothing
	kindUUID
	kindText
	kindInt
	kindTime
	kindText0 // text only: mixed elements, or a time PostgreSQL must judge
)

// binHeader is the binary array's header for one dimension: ndim, the
// has-NULL flag, the element type's OID, the dimension's length and lower
// bound (array_recv).
const binHeader = 20

// The OIDs of the element types (pg_type).
const (
	oidInt8        = 20
	oidText        = 25
	oidTimestamptz = 1184
	oidUUID        = 2950
	oidJSONB       = 3802
)

// next counts an element of kind k in, and reports whether its text is to
// be added to txt (the elements are mixed).
func (a *Array) next(k elemKind) bool {
	if a.n == 0 {
		a.bin = append(a.bin[:0], make([]byte, binHeader)...)
		a.txt, a.kind, a.nulls = a.txt[:0], kindNone, false
	}
	a.n++
	switch {
	case k == kindNone:
		a.nulls = true
	case a.kind == k:
	case a.kind == kindNone && k != kindText0:
		a.kind = k
	case a.kind != kindText0: // mixed from here: the text so far, then as they come
		a.txt = a.render(a.txt[:0], a.kind)
		a.kind = kindText0
	}
	if a.kind != kindText0 {
		return false
	}
	if a.n > 1 {
		a.txt = append(a.txt, ',')
	}
	return true
}

// elem appends one binary element of n bytes and returns them.
func (a *Array) elem(n int) []byte {
	a.bin = binary.BigEndian.AppendUint32(a.bin, uint32(n))
	a.bin = append(a.bin, make([]byte, n)...)
	return a.bin[len(a.bin)-n:]
}

// Text adds s.
func (a *Array) Text(s string) {
	if a.next(kindText) {
		a.txt = quote(a.txt, s)
	}
	a.bin = binary.BigEndian.AppendUint32(a.bin, uint32(len(s)))
	a.bin = append(a.bin, s...)
}

func quote(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

// Null adds NULL.
func (a *Array) Null() {
	if a.next(kindNone) {
		a.txt = append(a.txt, "NULL"...)
	}
	a.bin = binary.BigEndian.AppendUint32(a.bin, 0xffffffff) // -1
}

// UUID adds id.
func (a *Array) UUID(id uuid.UUID) {
	if a.next(kindUUID) {
		a.txt = appendUUID(a.txt, id[:])
	}
	copy(a.elem(16), id[:])
}

// UUIDs adds one element holding the array ids ('{"{…,…}"}'), for a
// column of type uuid[]: the statement casts it (Column.Cast).
func (a *Array) UUIDs(ids []uuid.UUID) {
	a.Text(UUIDArray(ids).text())
}

// Int adds n.
func (a *Array) Int(n int64) {
	if a.next(kindInt) {
		a.txt = strconv.AppendInt(a.txt, n, 10)
	}
	binary.BigEndian.PutUint64(a.elem(8), uint64(n))
}

// Time adds t, to the nanosecond: PostgreSQL rounds it to its
// microsecond, as it does a timestamp parameter; the binary form and the
// text rendered from it hold that microsecond already (pgMicros).
func (a *Array) Time(t time.Time) {
	k := kindTime
	if !pgReadsAsText(t) {
		k = kindText0 // as text, to the server to refuse
	}
	if a.next(k) {
		a.txt = append(a.txt, '"')
		a.txt = t.AppendFormat(a.txt, "2006-01-02T15:04:05.999999999Z07:00")
		a.txt = append(a.txt, '"')
	}
	binary.BigEndian.PutUint64(a.elem(8), uint64(pgMicros(t)))
}

// pgReadsAsText reports whether PostgreSQL reads t's text, in either form
// an Array writes it (in its own offset, as Time adds it to a mixed array,
// or in UTC, as render does), as the time t is: a year of 1–9999 in both
// (it refuses year 0, the year before 1; years past 9999 it reads, but they
// stay text, as they were) and an offset within ±15:59 (MAX_TZDISP_HOUR;
// Go's RFC 3339 parser takes up to ±23:59). Any other time goes as text, so
// that a refusal stays the server's, as it was before arrays went in
// binary (TestArrayTimesTheServerWouldRefuseStayText asks the server).
func pgReadsAsText(t time.Time) bool {
	u := t.UTC().Year()
	return StorableTime(t) && t.Year() <= 9999 && u >= 1 && u <= 9999
}

// pgEpoch is 2000-01-01T00:00:00Z in Unix seconds: a timestamptz's zero.
const pgEpoch = 946684800

// pgMicros is t as PostgreSQL stores a timestamptz: microseconds since
// 2000-01-01 UTC, rounded as its text input rounds the fraction Time
// writes (rint(strtod(".fffffffff") × 10⁶): to nearest, ties to even, in
// double precision; float64(ns)/1e9 is the same double as strtod's).
func pgMicros(t time.Time) int64 {
	frac := math.RoundToEven(float64(t.Nanosecond()) / 1e9 * 1e6)
	return (t.Unix()-pgEpoch)*1_000_000 + int64(frac)
}

// render appends the text of the elements so far, all of kind k or NULL,
// comma-separated.
func (a *Array) render(b []byte, k elemKind) []byte {
	be := binary.BigEndian
	rest := a.bin[min(binHeader, len(a.bin)):]
	for i := 0; len(rest) > 0; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		n := int32(be.Uint32(rest))
		rest = rest[4:]
		if n < 0 {
			b = append(b, "NULL"...)
			continue
		}
		e := rest[:n]
		rest = rest[n:]
		switch k {
		case kindUUID:
			b = appendUUID(b, e)
		case kindInt:
			b = strconv.AppendInt(b, int64(be.Uint64(e)), 10)
		case kindTime:
			us := int64(be.Uint64(e))
			b = append(b, '"')
			b = time.UnixMicro(us+pgEpoch*1_000_000).UTC().AppendFormat(b, "2006-01-02T15:04:05.999999Z07:00")
			b = append(b, '"')
		default:
			b = quote(b, string(e))
		}
	}
	return b
}

// Len is the number of elements added.
func (a *Array) Len() int { return a.n }

// Value implements driver.Valuer: the text form, for a connection not
// opened by OpenDB.
func (a *Array) Value() (driver.Value, error) { a.sent = true; return a.text(), nil }

// text is the array literal.
func (a *Array) text() string {
	if a.n == 0 {
		return "{}"
	}
	b := make([]byte, 0, 2+2*len(a.bin)+len(a.txt))
	b = append(b, '{')
	if a.kind == kindText0 {
		b = append(b, a.txt...)
	} else {
		b = a.render(b, a.kind)
	}
	return string(append(b, '}'))
}

// binary returns the binary form, or false where the array goes as text
// (the type above).
func (a *Array) binary() ([]byte, bool) {
	var oid uint32
	switch {
	case a.kind == kindUUID && (a.typ == "" || a.typ == "uuid"):
		oid = oidUUID
	case a.kind == kindText && (a.typ == "" || a.typ == "text"):
		oid = oidText
	case a.kind == kindText && a.typ == "jsonb":
		return a.jsonb(), true
	case a.kind == kindInt && (a.typ == "" || a.typ == "bigint"):
		oid = oidInt8
	case a.kind == kindTime && (a.typ == "" || a.typ == "timestamptz"):
		oid = oidTimestamptz
	default:
		return nil, false
	}
	a.header(a.bin, oid)
	return a.bin, true
}

func (a *Array) header(b []byte, oid uint32) {
	be := binary.BigEndian
	be.PutUint32(b[0:], 1) // one dimension
	flags := uint32(0)
	if a.nulls {
		flags = 1
	}
	be.PutUint32(b[4:], flags)
	be.PutUint32(b[8:], oid)
	be.PutUint32(b[12:], uint32(a.n))
	be.PutUint32(b[16:], 1) // lower bound
}

// jsonb is the binary form of text elements as jsonb: each element's text
// after jsonb's version byte (1), which the server parses as JSON.
func (a *Array) jsonb() []byte {
	out := make([]byte, binHeader, len(a.bin)+a.n)
	for rest := a.bin[binHeader:]; len(rest) > 0; {
		n := int32(binary.BigEndian.Uint32(rest))
		rest = rest[4:]
		if n < 0 {
			out = binary.BigEndian.AppendUint32(out, uint32(n))
			continue
		}
		out = binary.BigEndian.AppendUint32(out, uint32(n+1))
		out = append(out, 1)
		out = append(out, rest[:n]...)
		rest = rest[n:]
	}
	a.header(out, oidJSONB)
	return out
}

func appendUUID(b []byte, id []byte) []byte {
	const hex = "0123456789abcdef"
	for i, c := range id {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hex[c>>4], hex[c&0xf])
	}
	return b
}

// UUIDArray is the array of ids.
func UUIDArray(ids []uuid.UUID) *Array {
	a := &Array{bin: make([]byte, 0, binHeader+20*len(ids))}
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
			values.typ = typ
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
		c.Values.typ = c.Type
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
	WriteInsertRows(&b, table, cols, tail)
	return b.Query()
}

// WriteInsertRows writes InsertRows' statement into b, numbering its
// arguments after b's: one part of a larger statement (a data-modifying
// WITH item).
func WriteInsertRows(b *sql.Builder, table string, cols []Column, tail string) {
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
	Unnest(b, cols)
	if tail != "" {
		b.WriteString(" " + strings.TrimSpace(tail))
	}
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
