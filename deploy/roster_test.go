package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pin-platform/pin/consumers/roster"
)

// TestREADMEMatchesTheRoster holds README's tables to the roster: each
// service's binary and topic in the overview, its topic, group and DLQ in
// the operating table, its default HTTP_ADDR in the environment table, and
// no other service in them.
func TestREADMEMatchesTheRoster(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	rows := 0
	for _, line := range strings.Split(readme, "\n") {
		if strings.HasPrefix(line, "| ") && strings.Contains(line, "-consumers`") && strings.Contains(line, "`bin/") {
			rows++
		}
	}
	if rows != len(roster.All) {
		t.Errorf("README's overview lists %d consumers, the roster %d", rows, len(roster.All))
	}
	for _, s := range roster.All {
		for _, want := range []string{
			fmt.Sprintf("| %s | `bin/%s` | `%s` |", s.Name(), s.Binary(), s.Topic()),
			fmt.Sprintf("| %s | `%s` | `%s` | `%s` |", s.Name(), s.Topic(), s.Group(), s.DLQTopic()),
			fmt.Sprintf("`%s` %s", s.Addr(), s.Name()),
		} {
			if !strings.Contains(readme, want) {
				t.Errorf("README lacks %q", want)
			}
		}
	}
}
