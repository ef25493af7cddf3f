package consumer_test

import (
	"os/exec"
	"strings"
	"testing"
)

// A route decides on its transaction's view, and on nothing else: written
// to take the transaction instead (or nothing), it does not compile. The
// same contract with the route written on its view does.
func TestARouteWithoutItsViewDoesNotTypeCheck(t *testing.T) {
	t.Parallel()
	build := func(dir string) (string, error) {
		out, err := exec.Command("go", "build", "./testdata/contract/"+dir).CombinedOutput()
		return string(out), err
	}
	if out, err := build("ok"); err != nil {
		t.Fatalf("the route written on its view does not build: %v\n%s", err, out)
	}
	out, err := build("noview")
	if err == nil {
		t.Fatal("a route deciding on a transaction instead of its view builds")
	}
	if !strings.Contains(out, "cannot use decideOnTx") || !strings.Contains(out, "v *view") {
		t.Fatalf("noview failed for another reason than the route's type:\n%s", out)
	}
}
