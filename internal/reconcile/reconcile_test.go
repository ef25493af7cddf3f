package reconcile

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/migrate/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestParseCount(t *testing.T) {
	vector := func(v string) string {
		return `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1764000000.123,"` + v + `"]}]}}`
	}
	for _, tc := range []struct {
		body string
		want int64
		bad  string // a part of the error; "": none
	}{
		{"42", 42, ""},
		{" 42\n", 42, ""},
		{"42.0", 42, ""},
		{"4.2e1", 42, ""},
		{"0", 0, ""},
		{vector("1234"), 1234, ""},
		{`{"status":"success","data":{"resultType":"scalar","result":[1764000000,"7"]}}`, 7, ""},
		{"-1", 0, "not a count"},
		{"4.5", 0, "not a count"},
		{"NaN", 0, "not a count"},
		{"+Inf", 0, "not a count"},
		{"", 0, "not a count"},
		{vector("NaN"), 0, "not a count"},
		{`{"status":"error","errorType":"bad_data","error":"parse error"}`, 0, "parse error"},
		{`{"status":"success","data":{"resultType":"matrix","result":[]}}`, 0, "a matrix"},
		{`{"status":"success","data":{"resultType":"vector","result":[]}}`, 0, "0 series"},
		{`{"status":`, 0, "neither a number nor a Prometheus answer"},
	} {
		n, err := ParseCount([]byte(tc.body))
		switch {
		case tc.bad == "" && (err != nil || n != tc.want):
			t.Errorf("ParseCount(%q) = %d, %v; want %d", tc.body, n, err, tc.want)
		case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("ParseCount(%q) = %d, %v; want an error with %q", tc.body, n, err, tc.bad)
		}
	}
}

// The ids are looked up a chunk at a time, and every missing one of every
// chunk is printed in the order read.
func TestListMissingInChunks(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("postgres", pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var ids bytes.Buffer
	var want []string
	for i := range 25 {
		id := uuid.New()
		fmt.Fprintln(&ids, id)
		switch i % 3 {
		case 0: // Active: not printed
			insertBond(t, db, id, "Active")
		case 1:
			insertBond(t, db, id, "Replaced")
			want = append(want, id.String()+"\tReplaced")
		case 2:
			want = append(want, id.String()+"\tabsent")
		}
	}
	var out bytes.Buffer
	listed, missing, err := ListMissing(context.Background(), db, &ids, 4, 0, &out)
	if err != nil || listed != 25 || missing != len(want) {
		t.Fatalf("ListMissing: %d listed, %d missing, %v; want 25, %d", listed, missing, err, len(want))
	}
	if got := strings.TrimSpace(out.String()); got != strings.Join(want, "\n") {
		t.Fatalf("printed\n%s\nwant\n%s", got, strings.Join(want, "\n"))
	}
}

func insertBond(t *testing.T, db *sql.DB, id uuid.UUID, status string) {
	t.Helper()
	if _, err := db.Exec(`INSERT INTO referral_bond_replicas (bond_id, referred_user_id, referrer_user_id, status, bound_at, replica_version, synced_at)
		VALUES ($1, $2, $3, $4, now(), 1, now())`, id, uuid.New(), uuid.New(), status); err != nil {
		t.Fatal(err)
	}
}
