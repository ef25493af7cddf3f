package consumer

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	_ "github.com/lib/pq"

	"github.com/pin-platform/pin/migrate/pgtest"
)

func TestSortedIDs(t *testing.T) {
	a, b := uuid.MustParse("00000000-0000-4000-8000-000000000002"), uuid.MustParse("00000000-0000-4000-8000-000000000001")
	ids := SortedIDs(map[uuid.UUID]int64{a: 7, b: 8})
	if len(ids) != 2 || bytes.Compare(ids[0][:], ids[1][:]) >= 0 {
		t.Fatalf("SortedIDs = %v, want byte order", ids)
	}
}

// One statement text whatever the number of rows: what the statement
// cache keeps prepared.
func TestInsertRowsHasOneTextForAnyNumberOfRows(t *testing.T) {
	texts := map[string]bool{}
	for _, n := range []int{1, 2, 77, 1000} {
		var ids, names Array
		for i := range n {
			ids.UUID(uuid.New())
			names.Text(strings.Repeat("x", i%5))
		}
		q, args := InsertRows("t", []Column{
			{Name: "id", Type: "uuid", Values: &ids},
			{Name: "members", Type: "text", Cast: "uuid[]", Values: &names},
		}, " ON CONFLICT (id) DO NOTHING ")
		texts[q] = true
		if len(args) != 2 {
			t.Fatalf("%d rows: %d arguments, want 2", n, len(args))
		}
	}
	want := `INSERT INTO "t" ("id", "members") SELECT u."id", u."members"::uuid[] FROM unnest($1::uuid[], $2::text[]) AS u("id", "members") ON CONFLICT (id) DO NOTHING`
	if len(texts) != 1 || !texts[want] {
		t.Fatalf("texts %v, want the one\n%s", texts, want)
	}
}

func TestArrayLiteral(t *testing.T) {
	var a Array
	if v, _ := a.Value(); v != "{}" {
		t.Fatalf("empty: %v", v)
	}
	id := uuid.MustParse("0aa1b2c3-d4e5-4f60-8172-8394a5b6c7d8")
	a.UUID(id)
	a.Text(`say "hi" \ bye`)
	a.Null()
	a.Int(-42)
	a.Time(time.Date(2026, 12, 2, 10, 0, 0, 123456789, time.FixedZone("", 3*3600)))
	a.UUIDs([]uuid.UUID{id, id})
	v, _ := a.Value()
	want := `{0aa1b2c3-d4e5-4f60-8172-8394a5b6c7d8,"say \"hi\" \\ bye",NULL,-42,"2026-12-02T10:00:00.123456789+03:00","{0aa1b2c3-d4e5-4f60-8172-8394a5b6c7d8,0aa1b2c3-d4e5-4f60-8172-8394a5b6c7d8}"}`
	if v != want || a.Len() != 6 {
		t.Fatalf("literal\n%v\nwant\n%s (len %d)", v, want, a.Len())
	}
}

// PostgreSQL reads the arrays back as they were written: awkward text,
// NULLs, times to the microsecond, uuid[] per row.
func TestSetBasedStatementsRoundTripOnPostgreSQL(t *testing.T) {
	db, err := sql.Open("postgres", pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (id uuid PRIMARY KEY, s text, at timestamptz, n bigint, members uuid[] NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 2, 10, 0, 0, 123456789, time.UTC)
	texts := []string{`"quoted" and \back\slashed`, "кириллица, comma {brace}", "", "NULL"}
	var ids, ss, ats, ns, members Array
	var all []uuid.UUID
	for i, s := range texts {
		id := uuid.New()
		all = append(all, id)
		ids.UUID(id)
		ss.Text(s)
		if i == 1 {
			ats.Null()
		} else {
			ats.Time(at)
		}
		ns.Int(int64(i) - 1)
		members.UUIDs(all)
	}
	q, args := InsertRows("t", []Column{
		{Name: "id", Type: "uuid", Values: &ids},
		{Name: "s", Type: "text", Values: &ss},
		{Name: "at", Type: "timestamptz", Values: &ats},
		{Name: "n", Type: "bigint", Values: &ns},
		{Name: "members", Type: "text", Cast: "uuid[]", Values: &members},
	}, "")
	if _, err := db.ExecContext(ctx, q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	for i, id := range all {
		var s string
		var got sql.NullTime
		var n int64
		var nm int
		if err := db.QueryRowContext(ctx, `SELECT s, at, n, cardinality(members) FROM t WHERE id = ANY($1::uuid[]) AND $2 = ANY(members)`,
			UUIDArray([]uuid.UUID{id}), id.String()).Scan(&s, &got, &n, &nm); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		if s != texts[i] || n != int64(i)-1 || nm != i+1 {
			t.Fatalf("row %d: %q %d %d, want %q %d %d", i, s, n, nm, texts[i], i-1, i+1)
		}
		if i == 1 && got.Valid || i != 1 && !got.Time.Equal(at.Round(time.Microsecond)) {
			t.Fatalf("row %d: at %v", i, got)
		}
	}
}

// A transaction's new rows take time-ordered keys: each after the one
// before, so they land at the right edge of the primary key's index.
func TestNewRowIDsAreVersion7AndIncreasing(t *testing.T) {
	prev := NewRowID()
	for range 10000 {
		id := NewRowID()
		if id.Version() != 7 {
			t.Fatalf("%s is a version %d UUID, want 7", id, id.Version())
		}
		if bytes.Compare(id[:], prev[:]) <= 0 {
			t.Fatalf("%s does not come after %s", id, prev)
		}
		prev = id
	}
}

// The binary form of an array reads as its text form does, element for
// element, for every kind: the server gets the same values whichever the
// connection sends (binary_parameters on or off). Times are compared to
// the microsecond PostgreSQL keeps, ties of the rounding included.
func TestArrayBinaryReadsAsItsText(t *testing.T) {
	url := pgtest.NewDB(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	db, err := sql.Open("postgres", url+sep+"binary_parameters=yes")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()

	zone := time.FixedZone("", -(9*3600 + 30*60))
	times := []time.Time{
		time.Date(2026, 12, 2, 10, 0, 0, 123456789, time.UTC),
		time.Date(1999, 12, 31, 23, 59, 59, 999999500, zone), // a tie that carries into the next second
		time.Date(1970, 1, 1, 0, 0, 0, 500, time.UTC),        // ties go to even
		time.Date(1970, 1, 1, 0, 0, 0, 1500, time.UTC),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC),
		time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).Add(-time.Nanosecond),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		ns := rng.Int64N(1e9)
		if rng.IntN(4) == 0 {
			ns = ns/1000*1000 + 500 // a tie
		}
		times = append(times, time.Unix(rng.Int64N(4e9)-2e9, ns).In(zone))
	}
	// The times as Time wrote them before there was a binary form: to
	// the nanosecond, for the server to round.
	var tm Array
	lit := []byte{'{'}
	for i, at := range times {
		if i%97 == 5 {
			tm.Null()
			lit = append(lit, "NULL,"...)
		}
		tm.Time(at)
		lit = append(at.AppendFormat(append(lit, '"'), "2006-01-02T15:04:05.999999999Z07:00"), `",`...)
	}
	lit[len(lit)-1] = '}'
	var ids, txt, ints, js Array
	for i, s := range []string{`"quoted" and \back\slashed`, "кириллица, comma {brace}", "", "NULL", "{}", `a,b`} {
		ids.UUID(uuid.New())
		if i == 2 {
			ids.Null()
		}
		txt.Text(s)
		txt.Null()
	}
	for _, n := range []int64{0, -1, 1, math.MaxInt64, math.MinInt64} {
		ints.Int(n)
	}
	for _, j := range []string{`{"SelectionId": "x", "n": 1.50, "t": "\u00e9"}`, `[]`, `{"a": {"b": null}}`} {
		js.Text(j)
	}
	js.Null()
	for _, c := range []struct {
		name, typ string
		a         *Array
		want      string // the literal both forms read as; "": the array's own text
	}{
		{"uuid", "uuid", &ids, ""}, {"text", "text", &txt, ""}, {"bigint", "bigint", &ints, ""},
		{"timestamptz", "timestamptz", &tm, string(lit)}, {"jsonb", "jsonb", &js, ""}, {"empty", "uuid", UUIDArray(nil), ""},
	} {
		c.a.typ = c.typ
		bin, ok := c.a.binary()
		if c.name == "empty" {
			if ok {
				t.Fatalf("empty array: binary form %x, want the text '{}'", bin)
			}
			continue
		}
		if !ok {
			t.Fatalf("%s: no binary form", c.name)
		}
		want := c.want
		if want == "" {
			want = c.a.text()
		}
		q := `SELECT count(*), count(*) FILTER (WHERE a IS NOT DISTINCT FROM w AND b IS NOT DISTINCT FROM w), min(n) FILTER (WHERE a IS DISTINCT FROM w OR b IS DISTINCT FROM w)
FROM unnest($1::` + c.typ + `[], $2::` + c.typ + `[], $3::` + c.typ + `[]) WITH ORDINALITY AS u(a, b, w, n)`
		var all, same int
		var first sql.NullInt64
		if err := db.QueryRowContext(ctx, q, bin, c.a.text(), want).Scan(&all, &same, &first); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if all != c.a.Len() || same != all {
			t.Fatalf("%s: %d of %d elements read alike in binary, as text and as written (first that differs: %v), want all %d", c.name, same, all, first, c.a.Len())
		}
	}
}

// What the binary form cannot carry as the text form would goes as text:
// mixed elements, a cast to another type, a time PostgreSQL must judge
// itself (it refuses year 0 as text: the refusal stays the server's).
func TestArrayGoesAsTextWhereBinaryWouldDiffer(t *testing.T) {
	var mixed, ints, year0, nulls Array
	mixed.UUID(uuid.New())
	mixed.Text("x")
	ints.Int(1)
	ints.typ = "integer"
	year0.Time(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	year0.Time(time.Date(0, 6, 1, 0, 0, 0, 0, time.UTC))
	var utcYear0, farOffset Array
	utcYear0.Time(time.Date(1, 1, 1, 0, 30, 0, 0, time.FixedZone("", 3600))) // year 0 in UTC
	farOffset.Time(time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 16*3600)))
	nulls.Null()
	for name, a := range map[string]*Array{"mixed": &mixed, "int as integer": &ints, "year 0": &year0, "year 0 in UTC": &utcYear0, "offset +16:00": &farOffset, "only NULL": &nulls} {
		if _, ok := a.binary(); ok {
			t.Errorf("%s: a binary form, want text", name)
		}
	}
	// The pool's connections send an Array as binary bytes only with
	// binary_parameters; text otherwise.
	var ids Array
	ids.UUID(uuid.New())
	for _, binary := range []bool{true, false} {
		nv := driver.NamedValue{Value: &ids}
		if err := (&textJSONConn{binary: binary}).CheckNamedValue(&nv); err != nil {
			t.Fatal(err)
		}
		if _, isBytes := nv.Value.([]byte); isBytes != binary {
			t.Fatalf("binary_parameters %v: sent %T", binary, nv.Value)
		}
	}
}

// pgReadsAsText holds where PostgreSQL reads both texts an Array may
// write of a time (in its own offset, and in UTC): the binary form stands
// only for such a time, and every time the server refuses goes as text.
// Years past 9999 the server reads, but they go as text all the same.
// StorableTime, which events' times are checked with, is the server's
// own verdict on the text in the time's offset.
func TestArrayTimesTheServerWouldRefuseStayText(t *testing.T) {
	db, err := sql.Open("postgres", pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	zone := func(s int) *time.Location { return time.FixedZone("", s) }
	for _, c := range []struct {
		at              time.Time
		binary, refused bool // refused: of either text; the text in its own offset is what events carry
	}{
		{time.Date(2026, 1, 1, 0, 0, 0, 0, zone(15*3600+59*60)), true, false},
		{time.Date(2026, 1, 1, 0, 0, 0, 0, zone(-(15*3600 + 59*60))), true, false},
		{time.Date(2026, 1, 1, 0, 0, 0, 0, zone(16*3600)), false, true},
		{time.Date(2026, 1, 1, 0, 0, 0, 0, zone(-16*3600)), false, true},
		{time.Date(2026, 1, 1, 0, 0, 0, 0, zone(23*3600+59*60)), false, true},
		{time.Date(1, 1, 1, 0, 30, 0, 0, zone(3600)), false, true},         // year 0 in UTC
		{time.Date(1, 1, 1, 0, 30, 0, 0, zone(-3600)), true, false},        // year 1 in both
		{time.Date(0, 12, 31, 23, 0, 0, 0, time.UTC), false, true},         // year 0
		{time.Date(9999, 12, 31, 23, 30, 0, 0, zone(3600)), true, false},   // year 9999 in both
		{time.Date(9999, 12, 31, 23, 30, 0, 0, zone(-3600)), false, false}, // year 10000 in UTC
		{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), false, false},
	} {
		refused, ownRefused := false, false
		for i, s := range []string{
			c.at.Format("2006-01-02T15:04:05.999999999Z07:00"),
			c.at.UTC().Format("2006-01-02T15:04:05.999999999Z07:00"),
		} {
			var got time.Time
			err := db.QueryRow(`SELECT ($1::timestamptz[])[1]`, `{"`+s+`"}`).Scan(&got)
			if err == nil && !got.Equal(c.at) {
				t.Fatalf("%s: the server read %s", s, got)
			}
			refused = refused || err != nil
			ownRefused = ownRefused || (i == 0 && err != nil)
		}
		name := c.at.Format(time.RFC3339)
		// CheckTime refuses what the server would (StorableTime), no more.
		if StorableTime(c.at) == ownRefused {
			t.Errorf("%s: StorableTime %v, the server refuses its text: %v", name, StorableTime(c.at), ownRefused)
		}
		if refused != c.refused {
			t.Errorf("%s: the server refuses a text of it: %v, want %v", name, refused, c.refused)
		}
		if got := pgReadsAsText(c.at); got != c.binary {
			t.Errorf("%s: pgReadsAsText %v, want %v", name, got, c.binary)
		}
	}
}
