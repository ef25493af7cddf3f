package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/migrate/pgtest"
)

// rewardsDB is a migrated database whose replica holds Active bonds
// active and the Revoked bond revoked.
func rewardsDB(t *testing.T) (urlFile string, active []uuid.UUID, revoked uuid.UUID) {
	t.Helper()
	u := pgtest.NewDB(t)
	db, err := sql.Open("postgres", u)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	insert := func(id uuid.UUID, status string) {
		t.Helper()
		if _, err := db.Exec(`INSERT INTO referral_bond_replicas (bond_id, referred_user_id, referrer_user_id, status, bound_at, replica_version, synced_at)
			VALUES ($1, $2, $3, $4, now(), 1, now())`, id, uuid.New(), uuid.New(), status); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		id := uuid.New()
		insert(id, "Active")
		active = append(active, id)
	}
	revoked = uuid.New()
	insert(revoked, "Revoked")
	return writeFile(t, "url", u+"\n"), active, revoked
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// reconcileCmd runs `pinctl rewards reconcile args…` and returns its exit
// code, its stdout and its stderr.
func reconcileCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := rewardsReconcileCmd(context.Background(), args, &out, &errOut)
	code := exitCode(&errOut, err)
	t.Logf("rewards reconcile %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
	return code, out.String(), errOut.String()
}

// Exit 0 on a match, 1 on a mismatch with the runbook's replay commands, 2
// on an error — for a number, a referral endpoint and a Prometheus query.
func TestRewardsReconcile(t *testing.T) {
	t.Parallel()
	urlFile, active, _ := rewardsDB(t)
	replay := "bin/pinctl group reset --group pin-rewards-referral-bonds --topic pin.referral.bonds.v1 --to-earliest"

	answers := map[string]struct {
		status int
		body   string
	}{
		"/count/3":           {200, "3\n"},
		"/count/4":           {200, "4"},
		"/api/v1/query/3":    {200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1764000000.5,"3"]}]}}`},
		"/api/v1/query/7":    {200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"job":"referral"},"value":[1764000000.5,"7"]}]}}`},
		"/api/v1/query/two":  {200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"1"},"value":[1,"3"]},{"metric":{"a":"2"},"value":[1,"3"]}]}}`},
		"/api/v1/query/none": {200, `{"status":"success","data":{"resultType":"vector","result":[]}}`},
		"/down":              {503, "referral is down"},
		"/garbage":           {200, "three"},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := answers[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(a.status)
		fmt.Fprint(w, a.body)
	}))
	t.Cleanup(srv.Close)

	for _, tc := range []struct {
		name  string
		args  []string
		code  int
		wants []string
	}{
		{"a number that matches", []string{"--expect-active", "3"}, 0,
			[]string{"replica:  3 Active bond(s)", "referral: 3 Active bond(s) (--expect-active)", "difference (replica − referral): +0", "match\n"}},
		{"a number that does not", []string{"--expect-active", "5"}, 1,
			[]string{"referral: 5 Active bond(s)", "difference (replica − referral): -2", "mismatch", "1. stop every rewards consumer", "2. " + replay, "3. start the rewards consumers"}},
		{"a referral endpoint that matches", []string{"--expect-active-from", srv.URL + "/count/3"}, 0, []string{"difference (replica − referral): +0"}},
		{"a referral endpoint that does not", []string{"--expect-active-from", srv.URL + "/count/4"}, 1, []string{"difference (replica − referral): -1", replay}},
		{"a Prometheus query that matches", []string{"--expect-active-from", srv.URL + "/api/v1/query/3"}, 0, []string{"referral: 3 Active bond(s)"}},
		{"a Prometheus query that does not", []string{"--expect-active-from", srv.URL + "/api/v1/query/7"}, 1, []string{"difference (replica − referral): -4", replay}},
	} {
		code, out, _ := reconcileCmd(t, append(tc.args, "--url-file", urlFile)...)
		if code != tc.code {
			t.Errorf("%s: exit %d, want %d", tc.name, code, tc.code)
		}
		for _, w := range tc.wants {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q:\n%s", tc.name, w, out)
			}
		}
		if tc.code == 0 && strings.Contains(out, "group reset") {
			t.Errorf("%s: a match prints the replay:\n%s", tc.name, out)
		}
	}

	// Errors: exit 2 with one line saying why, and no verdict.
	unreachable := writeFile(t, "down", withPassword("postgres://127.0.0.1:1/none?sslmode=disable&connect_timeout=2", tricky)+"\n")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"an endpoint that fails", []string{"--expect-active-from", srv.URL + "/down", "--url-file", urlFile}, "503"},
		{"an answer that is not a count", []string{"--expect-active-from", srv.URL + "/garbage", "--url-file", urlFile}, "is not a count"},
		{"a query of two series", []string{"--expect-active-from", srv.URL + "/api/v1/query/two", "--url-file", urlFile}, "2 series, want 1"},
		{"a query of no series", []string{"--expect-active-from", srv.URL + "/api/v1/query/none", "--url-file", urlFile}, "0 series, want 1"},
		{"a database that cannot be reached", []string{"--expect-active", "3", "--url-file", unreachable}, "count the replica's Active bonds: dial tcp"},
		{"no referral count", []string{"--url-file", urlFile}, "is required"},
		{"two referral counts", []string{"--expect-active", "3", "--expect-active-from", srv.URL + "/count/3", "--url-file", urlFile}, "give one of"},
		{"a bond id file that is not there", []string{"--list-missing", filepath.Join(t.TempDir(), "none"), "--url-file", urlFile}, "--list-missing"},
		{"a bond id that is not one", []string{"--list-missing", writeFile(t, "ids", active[0].String()+"\nnot-a-uuid\n"), "--url-file", urlFile}, "line 2"},
	} {
		code, out, errOut := reconcileCmd(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", tc.name, code, errOut, tc.want)
		}
		if strings.Contains(out, "match") {
			t.Errorf("%s: a verdict after an error:\n%s", tc.name, out)
		}
		if l := leaks(out+errOut, tricky); len(l) > 0 {
			t.Errorf("%s: the password is printed (%q)", tc.name, l)
		}
	}
}

// --list-missing prints the referral side's Active bonds the replica lacks
// or holds in another status, and nothing of those it holds Active.
func TestRewardsReconcileListMissing(t *testing.T) {
	t.Parallel()
	urlFile, active, revoked := rewardsDB(t)
	absent := uuid.New()
	ids := "# the referral service's Active bonds\n" + active[0].String() + "\n\n" + revoked.String() + "\n" +
		active[1].String() + "\n" + strings.ToUpper(absent.String()) + "\n" + active[2].String() + "\n"
	code, out, _ := reconcileCmd(t, "--list-missing", writeFile(t, "ids", ids), "--url-file", urlFile)
	if code != 1 {
		t.Errorf("exit %d, want 1 (two listed bonds are not Active in the replica)", code)
	}
	want := revoked.String() + "\tRevoked\n" + absent.String() + "\tabsent\n"
	if !strings.HasPrefix(out, want) {
		t.Errorf("output does not start with the two missing bonds in the file's order:\n%s\nwant\n%s", out, want)
	}
	for _, id := range active {
		if strings.Contains(out, id.String()) {
			t.Errorf("a bond the replica holds Active is listed: %s\n%s", id, out)
		}
	}
	for _, w := range []string{"referral: 5 Active bond(s) (the ids listed)", "difference (replica − referral): -2", "listed:   5 id(s), 2 of them not Active in the replica"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}

	// Every listed bond Active, and the count given: a match.
	only := writeFile(t, "active", active[0].String()+"\n"+active[1].String()+"\n"+active[2].String()+"\n")
	if code, out, _ := reconcileCmd(t, "--list-missing", only, "--expect-active", "3", "--url-file", urlFile); code != 0 || !strings.Contains(out, "match\n") {
		t.Errorf("every listed bond Active: exit %d, want 0\n%s", code, out)
	}
}
