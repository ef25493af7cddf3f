package consumer

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// syncBuffer is an output the batcher's timer and the test read at once.
type syncBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.b.Write(p)
}

func (s *syncBuffer) get() (string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String(), s.writes
}

// Info lines wait for Flush (a batch's end) and go in one write; a
// warning goes at once, after the lines before it; a line left alone
// goes within its delay. The batcher under test holds lines for an hour,
// so that a busy machine's timer cannot write them before Flush; a second
// one, of a millisecond, writes a line left alone.
func TestLineBatcherHoldsInfoLinesUntilTheBatchEnds(t *testing.T) {
	out := &syncBuffer{}
	lines := newLineBatcher(out, time.Hour)
	log := zerolog.New(lines)
	for i := range 3 {
		log.Info().Int("n", i).Msg("attached")
	}
	if got, _ := out.get(); got != "" {
		t.Fatalf("info lines written before the batch ended: %q", got)
	}
	lines.Flush()
	got, writes := out.get()
	if writes != 1 || strings.Count(got, "\n") != 3 || !strings.Contains(got, `"n":0`) || strings.Index(got, `"n":0`) > strings.Index(got, `"n":2`) {
		t.Fatalf("after Flush: %d writes of %q, want the 3 lines in order in one", writes, got)
	}

	log.Info().Msg("before")
	log.Warn().Msg("warned")
	got, writes = out.get()
	if writes != 2 || !strings.HasSuffix(got, "\"message\":\"before\"}\n{\"level\":\"warn\",\"message\":\"warned\"}\n") {
		t.Fatalf("a warning: %d writes, output %q; want it written at once, after the info line before it", writes, got)
	}

	out = &syncBuffer{}
	log = zerolog.New(newLineBatcher(out, time.Millisecond))
	log.Info().Msg("alone")
	deadline := time.Now().Add(5 * time.Second)
	for {
		if got, _ = out.get(); strings.Contains(got, "alone") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a lone info line never written")
		}
		time.Sleep(time.Millisecond)
	}
}
