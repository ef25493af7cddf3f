package term

import (
	"bytes"
	"strings"
	"testing"
)

// On a terminal the bar is one line redrawn in place, with its note, ended
// by Done; the line that reaches the total is never skipped.
func TestProgressOnATerminal(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	p := NewProgress(&b, true, "replay", 4)
	p.SetNote(1, "replayed 1")
	p.SetNote(2, "replayed 2") // within 100 ms of the first: skipped
	p.SetNote(4, "replayed 4")
	p.Done()
	out := b.String()
	if strings.Count(out, "\r") != 2 || !strings.HasSuffix(out, "\n") || strings.Count(out, "\n") != 1 {
		t.Fatalf("want two redraws and one line end:\n%q", out)
	}
	last := out[strings.LastIndex(out, "\r")+1:]
	if !strings.HasPrefix(last, "  replay   [██████████████████████████████] 100% 4/4 ") || !strings.HasSuffix(last, "/s  replayed 4\n") {
		t.Fatalf("last redraw %q", last)
	}
}

// Off a terminal it prints plain lines; Stop ends nothing there.
func TestProgressOffATerminal(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	p := NewProgress(&b, false, "produce", 10)
	p.Set(10)
	p.Stop()
	if got := b.String(); !strings.HasPrefix(got, "  produce  100% 10/10 ") || strings.Count(got, "\n") != 1 || strings.Contains(got, "\r") {
		t.Fatalf("output %q", got)
	}
}

// Stop on a terminal ends the line only when something was drawn; a bar of
// no steps draws nothing.
func TestProgressStop(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	NewProgress(&b, true, "x", 3).Stop()
	NewProgress(&b, true, "x", 0).Set(1)
	if b.Len() != 0 {
		t.Fatalf("output %q, want none", b.String())
	}
	p := NewProgress(&b, true, "x", 3)
	p.Set(1)
	p.Stop()
	if got := b.String(); !strings.HasPrefix(got, "\r  x        [") || !strings.HasSuffix(got, "\n") {
		t.Fatalf("output %q", got)
	}
}
