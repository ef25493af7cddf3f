package devenv

import "testing"

// A consumer's URL is the database's with its service's login; the
// query (the benchmark adds its own parameters) is kept.
func TestServiceURL(t *testing.T) {
	t.Parallel()
	admin := "postgres://postgres@127.0.0.1:5433/postgres?sslmode=disable"
	db := withDB(admin, "pin")
	if want := "postgres://postgres@127.0.0.1:5433/pin?sslmode=disable"; db != want {
		t.Fatalf("withDB = %q, want %q", db, want)
	}
	got := ServiceURL(db+"&binary_parameters=yes", "rewards")
	if want := "postgres://rewards_consumer@127.0.0.1:5433/pin?sslmode=disable&binary_parameters=yes"; got != want {
		t.Fatalf("ServiceURL = %q, want %q", got, want)
	}
}
