package term

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Progress is pinctl's progress bar: on a terminal one line redrawn in
// place,
//
//	produce  [█████████·····················]  30% 3000/10000 2918/s  note
//
// and off a terminal plain lines ("  produce   30% 3000/10000 2918/s").
// A line is drawn at most every 100 ms, except the one that reaches the
// total. The zero value is not usable: make one with NewProgress.
type Progress struct {
	w      io.Writer
	tty    bool
	label  string
	total  int
	last   int
	note   string
	lastAt time.Time
	start  time.Time
	drawn  bool
}

// NewProgress returns a bar of total steps named label, drawn on w; tty
// says whether w is a terminal (IsTerminal). A total ≤ 0 draws nothing.
func NewProgress(w io.Writer, tty bool, label string, total int) *Progress {
	return &Progress{w: w, tty: tty, label: label, total: total, start: time.Now(), last: -1}
}

// Set moves the bar to n steps done, keeping the note.
func (p *Progress) Set(n int) { p.SetNote(n, p.note) }

// SetNote moves the bar to n steps done, with note (counts, say) after the
// rate.
func (p *Progress) SetNote(n int, note string) {
	if p.total <= 0 || (n == p.last && note == p.note) {
		return
	}
	p.note = note
	now := time.Now()
	if n != p.total && now.Sub(p.lastAt) < 100*time.Millisecond && (p.tty || now.Sub(p.lastAt) < 2*time.Second) {
		return
	}
	p.last, p.lastAt, p.drawn = n, now, true
	pct := n * 100 / p.total
	rate := float64(n) / max(now.Sub(p.start).Seconds(), 0.001)
	if note != "" {
		note = "  " + note
	}
	if p.tty {
		const width = 30
		fill := min(max(width*n/p.total, 0), width)
		fmt.Fprintf(p.w, "\r  %-8s [%s%s] %3d%% %d/%d %.0f/s%s", p.label, strings.Repeat("█", fill), strings.Repeat("·", width-fill), pct, n, p.total, rate, note)
		return
	}
	fmt.Fprintf(p.w, "  %-8s %3d%% %d/%d %.0f/s%s\n", p.label, pct, n, p.total, rate, note)
}

// Done draws the bar at its total and, on a terminal, ends its line: the
// work is complete.
func (p *Progress) Done() {
	p.Set(p.total)
	if p.tty {
		fmt.Fprintln(p.w)
	}
}

// Stop ends the bar's line where it stands, on a terminal where it was
// drawn: the work ended short of the total, or its last step was counted
// already.
func (p *Progress) Stop() {
	if p.tty && p.drawn {
		fmt.Fprintln(p.w)
	}
}
