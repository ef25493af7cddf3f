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

// TestEveryServiceIsBuiltShippedAndWatched holds the places that name
// each service by hand to the roster: the Makefile builds its binary
// (SERVICES) and runs its package under -race (RACE_PKGS), the image
// carries the binary (Containerfile), and alerts.yml has its group and
// names its job where an alert lists the services.
func TestEveryServiceIsBuiltShippedAndWatched(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	line := func(text, prefix string) string {
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, prefix) {
				return l
			}
		}
		t.Fatalf("no line starting %q", prefix)
		return ""
	}
	mk, image, alerts := read("Makefile"), read("Containerfile"), read("deploy/prometheus/alerts.yml")
	services, race := line(mk, "SERVICES "), line(mk, "RACE_PKGS ")
	shipped := ""
	for _, l := range strings.Split(image, "\n") {
		if strings.HasPrefix(l, "COPY ") && strings.Contains(l, "/usr/local/bin/") {
			shipped += l // the binaries' COPY
		}
	}
	down := line(alerts, "        expr: up{job=~")
	for _, s := range roster.All {
		if !strings.Contains(" "+services+" ", " "+s.Binary()+" ") {
			t.Errorf("the Makefile's SERVICES lacks %s", s.Binary())
		}
		if !strings.Contains(race, "./consumers/"+s.Name()+"/...") {
			t.Errorf("the Makefile's RACE_PKGS lacks ./consumers/%s/...", s.Name())
		}
		if !strings.Contains(" "+shipped+" ", " "+s.Binary()+" ") {
			t.Errorf("the Containerfile's COPY lacks %s", s.Binary())
		}
		if !strings.Contains(alerts, "  - name: pin-consumers-"+s.Name()+"\n") {
			t.Errorf("alerts.yml has no group pin-consumers-%s (its lag and DLQ)", s.Name())
		}
		if !strings.Contains(down, s.Name()) {
			t.Errorf("the job list of %q lacks %s", down, s.Name())
		}
	}
}
