package consumer

import (
	"io"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// lineBatcher is the process's log output: it gathers info and debug
// lines and writes them together, at the end of each batch a worker
// handled (its messages, the transaction that committed them and their
// outcome lines: Options.FlushLog) and at most logFlushDelay after the
// first of them otherwise; a warning, an error or a line with no level is
// written at once, with the lines before it. A backlog's outcome lines
// (one per message, two for crm's lead-event-added) were one write(2)
// each: 4 % of crm's CPU. The lines keep their order and their own time;
// only when they reach the output moves, by at most one batch or
// logFlushDelay. A process that dies before it writes them loses the info
// and debug lines it holds, at most logFlushDelay's worth: killed outright
// (SIGKILL, the OOM killer), as it loses its after-commit hooks
// (DESIGN.md), or by a Go runtime's fatal error or a panic no one
// recovers (the runtime recovers a handler's own: tx.go), whose stack
// trace still reaches stderr. A warning or an error is never held.
type lineBatcher struct {
	mu    sync.Mutex
	out   io.Writer
	delay time.Duration // how long a line waits for Flush at most
	buf   []byte
	timer *time.Timer // armed while buf holds lines
}

// logFlushDelay bounds how long an info line waits for its batch to end.
const logFlushDelay = 10 * time.Millisecond

// logBufferLimit is the most a batcher holds before it writes.
const logBufferLimit = 64 << 10

// newLineBatcher returns a batcher writing to out, holding a line
// delay at most (logFlushDelay in a process).
func newLineBatcher(out io.Writer, delay time.Duration) *lineBatcher {
	b := &lineBatcher{out: out, delay: delay}
	b.timer = time.AfterFunc(time.Hour, b.Flush)
	b.timer.Stop()
	return b
}

// Write takes a line that carries no level (zerolog writes its events
// through WriteLevel; Main's own prints come here): at once, as a warning.
func (b *lineBatcher) Write(p []byte) (int, error) {
	return b.WriteLevel(zerolog.NoLevel, p)
}

// WriteLevel implements zerolog.LevelWriter.
func (b *lineBatcher) WriteLevel(l zerolog.Level, p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf) == 0 && l < zerolog.WarnLevel {
		b.timer.Reset(b.delay)
	}
	b.buf = append(b.buf, p...)
	if l >= zerolog.WarnLevel || len(b.buf) >= logBufferLimit {
		b.flushLocked()
	}
	return len(p), nil
}

// Flush writes the lines gathered so far.
func (b *lineBatcher) Flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushLocked()
}

func (b *lineBatcher) flushLocked() {
	if len(b.buf) == 0 {
		return
	}
	b.timer.Stop()
	// An output that fails loses these lines, as zerolog loses a line
	// whose write failed; the next ones try again.
	_, _ = b.out.Write(b.buf)
	if cap(b.buf) > logBufferLimit*2 {
		b.buf = nil
		return
	}
	b.buf = b.buf[:0]
}
