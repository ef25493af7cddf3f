package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// pos is where a message is in its topic.
type pos struct {
	partition int32
	offset    int64
}

func (p pos) String() string { return fmt.Sprintf("%d@%d", p.partition, p.offset) }

// record is a message as its topic holds it: where, and what the
// generator made it as.
type record struct {
	pos
	ev *event
}

// sortRecords puts records in partition order: by partition, then offset.
// The services' keys are what their order rests on, and a key stays in one
// partition, so the model applies each partition in offset order.
func sortRecords(recs []record) {
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].partition != recs[j].partition {
			return recs[i].partition < recs[j].partition
		}
		return recs[i].offset < recs[j].offset
	})
}

// expectation is what the model expects of the messages themselves,
// whatever the service: which end in the DLQ with which code, and which
// idempotency marks the others leave with which outcome.
type expectation struct {
	records int
	// dlq: the poison messages, by position, with their code.
	dlq map[pos]expectedDLQ
	// marks: idempotency key → the outcomes its mark may have.
	marks map[string]expectedMark
	// poisonKeys: the idempotency key a poison message would mark, with
	// its note, to name the message behind a mark nobody expects.
	poisonKeys map[string]string
	// disagree lists messages where the generator meant one thing and
	// the model found another: a fault of the run, not of the consumer.
	disagree []string
}

type expectedDLQ struct {
	code string
	note string
}

type expectedMark struct {
	outcomes []string
	at       pos
	note     string
}

func newExpectation(n int) expectation {
	return expectation{records: n, dlq: map[pos]expectedDLQ{}, marks: map[string]expectedMark{}, poisonKeys: map[string]string{}}
}

// deadLetter expects r in the DLQ with code. key is the idempotency key
// its mark would have ("" when it has none).
func (x *expectation) deadLetter(r record, code, key string) {
	x.dlq[r.pos] = expectedDLQ{code: code, note: r.ev.note}
	if key != "" {
		x.poisonKeys[key] = r.ev.note
	}
	x.agree(r, code)
}

// settled decides what every service's model decides alike, before its
// own rules: a poison message goes to the DLQ, a message of an unknown
// event type and a copy of one already marked are acknowledged and change
// nothing. It returns r's mark key and whether r is settled.
func (x *expectation) settled(r record) (string, bool) {
	e := r.ev
	switch {
	case e.code != "":
		x.deadLetter(r, e.code, e.markKey())
		return "", true
	case e.unknownType:
		x.agree(r, "")
		return "", true
	}
	key := e.markKey()
	if _, done := x.marks[key]; done {
		x.agree(r, "") // a duplicate: acknowledged, nothing changes
		return key, true
	}
	return key, false
}

// mark expects the idempotency key's mark with one of outcomes.
func (x *expectation) mark(r record, key string, outcomes ...string) {
	x.marks[key] = expectedMark{outcomes: outcomes, at: r.pos, note: r.ev.note}
	x.agree(r, "")
}

// agree checks the model's DLQ code for r against the generator's.
func (x *expectation) agree(r record, code string) {
	if r.ev.want != code {
		x.disagree = append(x.disagree, fmt.Sprintf("%s (%s, seq %d): generated for DLQ %q, the model says %q",
			r.pos, r.ev.note, r.ev.seq, r.ev.want, code))
	}
}

// Tally is one service's result: the counts of the line and examples of
// what is off.
type Tally struct {
	service string
	events  int
	lost    int
	doubled int
	wrong   int
	// poison: poison messages produced; poisonOK: those found in the DLQ
	// with their code.
	poison, poisonOK int
	// notPoison: dead letters of messages that are not poison.
	notPoison int
	notes     []string
	more      int // notes left out
}

// maxNotes is how many examples of what is off a tally keeps.
const maxNotes = 12

func (t *Tally) note(format string, args ...any) {
	if len(t.notes) >= maxNotes {
		t.more++
		return
	}
	t.notes = append(t.notes, fmt.Sprintf(format, args...))
}

func (t *Tally) addLost(format string, args ...any) {
	t.lost++
	t.note("lost: "+format, args...)
}

func (t *Tally) addDoubled(format string, args ...any) {
	t.doubled++
	t.note("doubled: "+format, args...)
}

func (t *Tally) addWrong(format string, args ...any) {
	t.wrong++
	t.note("wrong: "+format, args...)
}

// OK reports a service whose database matches the model, with every
// poison message in the DLQ and nothing else.
func (t *Tally) OK() bool {
	return t.lost == 0 && t.doubled == 0 && t.wrong == 0 && t.poisonOK == t.poison && t.notPoison == 0
}

// Line is the service's result line.
func (t *Tally) Line() string {
	s := fmt.Sprintf("%-9s events=%d lost=%d doubled=%d wrong=%d poison_in_dlq=%d/%d",
		t.service, t.events, t.lost, t.doubled, t.wrong, t.poisonOK, t.poison)
	if t.notPoison > 0 {
		s += fmt.Sprintf(" dlq_not_poison=%d", t.notPoison)
	}
	return s
}

// Notes are examples of what is off, one per line.
func (t *Tally) Notes() []string {
	out := slices.Clone(t.notes)
	if t.more > 0 {
		out = append(out, fmt.Sprintf("… and %d more", t.more))
	}
	return out
}

// poisonKindOf is the kind in a poison message's note: copies ("again: ")
// count with their original.
func poisonKindOf(note string) string {
	for strings.HasPrefix(note, "again: ") {
		note = strings.TrimPrefix(note, "again: ")
	}
	return strings.TrimPrefix(note, "poison: ")
}

// compareMessages checks the marks and the dead letters against x. marks
// is the service's group's processed_messages (key → outcome); dlq the
// codes of its DLQ's records by source position.
func compareMessages(t *Tally, x *expectation, marks map[string]string, dlq map[pos][]string) {
	t.events = x.records
	for _, d := range x.disagree {
		t.addWrong("the run's generator and model disagree: %s", d)
	}
	// Poison that missed, by kind: how many, and where one of them is.
	type miss struct {
		n     int
		where pos
	}
	missed := map[string]*miss{}
	for p, want := range x.dlq {
		t.poison++
		got := dlq[p]
		if slices.Contains(got, want.code) {
			t.poisonOK++
			continue
		}
		kind := poisonKindOf(want.note)
		what := fmt.Sprintf("poison not in the DLQ: %s (want %s)", kind, want.code)
		if len(got) > 0 {
			what = fmt.Sprintf("poison dead-lettered as %s: %s (want %s)", strings.Join(got, ","), kind, want.code)
		}
		m := missed[what]
		if m == nil {
			m = &miss{}
			missed[what] = m
		}
		m.n++
		if m.n == 1 || p.partition < m.where.partition || p.partition == m.where.partition && p.offset < m.where.offset {
			m.where = p
		}
	}
	whats := make([]string, 0, len(missed))
	for w := range missed {
		whats = append(whats, w)
	}
	sort.Strings(whats)
	for _, w := range whats {
		t.note("%s: %d, e.g. at %s", w, missed[w].n, missed[w].where)
	}
	for p, codes := range dlq {
		if _, ok := x.dlq[p]; !ok {
			t.notPoison++
			t.note("not poison, yet dead-lettered: the message at %s (%s)", p, strings.Join(codes, ","))
		}
	}
	for k, m := range x.marks {
		got, ok := marks[k]
		switch {
		case !ok:
			t.addLost("no idempotency mark for %s at %s (%s)", k, m.at, m.note)
		case !slices.Contains(m.outcomes, got):
			t.addWrong("mark %s at %s (%s): outcome %s, want %s", k, m.at, m.note, got, strings.Join(m.outcomes, " or "))
		}
	}
	for k, out := range marks {
		if _, ok := x.marks[k]; !ok {
			if note, ok := x.poisonKeys[k]; ok {
				t.addWrong("%s has a mark (%s), yet it is poison (%s): it was processed, not dead-lettered", k, out, poisonKindOf(note))
				continue
			}
			t.addWrong("a mark the model does not expect: %s (%s)", k, out)
		}
	}
}
