package dlq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/internal/term"
)

// envelopeSummary is the part of a message's envelope list and replay
// print.
type envelopeSummary struct {
	MessageID string    `json:"message_id"`
	EventType string    `json:"event_type"`
	CreatedAt time.Time `json:"created_at,omitzero"`
}

func summarizeEnvelope(value []byte) (envelopeSummary, error) {
	e, err := consumer.DecodeEnvelope(value)
	if err != nil {
		return envelopeSummary{}, err
	}
	return envelopeSummary{MessageID: e.MessageID.String(), EventType: e.EventType, CreatedAt: e.CreatedAt}, nil
}

// printableKey shows a key as it may be printed (see term.Printable), and
// a null key as (null).
func printableKey(b []byte) string {
	if b == nil {
		return "(null)"
	}
	return term.Printable(string(b))
}

// entry is one message as List prints it: with JSON, one object per line.
type entry struct {
	Partition       int32             `json:"partition"`
	Offset          int64             `json:"offset"`
	Timestamp       time.Time         `json:"timestamp"`
	Code            string            `json:"code"`
	Attempts        *int              `json:"attempts,omitempty"`
	DLQAt           string            `json:"dlq_at,omitempty"`
	SourceTopic     string            `json:"source_topic,omitempty"`
	SourcePartition *int              `json:"source_partition,omitempty"`
	SourceOffset    *int64            `json:"source_offset,omitempty"`
	ConsumerGroup   string            `json:"consumer_group,omitempty"`
	Reason          string            `json:"reason,omitempty"`
	ReplayCount     int               `json:"replay_count,omitempty"`
	Key             string            `json:"key"`
	Envelope        *envelopeSummary  `json:"envelope,omitempty"`
	EnvelopeError   string            `json:"envelope_error,omitempty"`
	Headers         map[string]string `json:"headers"`
}

func newEntry(r *record) entry {
	e := entry{
		Partition:     r.Partition,
		Offset:        r.Offset,
		Timestamp:     r.Timestamp.UTC(),
		Code:          r.header(consumer.HeaderErrorCode),
		DLQAt:         r.header(consumer.HeaderDLQAt),
		SourceTopic:   r.header(consumer.HeaderSourceTopic),
		ConsumerGroup: r.header(consumer.HeaderConsumerGroup),
		Reason:        r.header(consumer.HeaderReason),
		Key:           string(r.Key),
		Headers:       map[string]string{},
	}
	if n, err := strconv.Atoi(r.header(consumer.HeaderAttempts)); err == nil {
		e.Attempts = &n
	}
	if n, err := strconv.Atoi(r.header(consumer.HeaderOriginalPartition)); err == nil {
		e.SourcePartition = &n
	}
	if n, err := strconv.ParseInt(r.header(consumer.HeaderOriginalOffset), 10, 64); err == nil {
		e.SourceOffset = &n
	}
	e.ReplayCount, _ = r.replayCount()
	if env, err := summarizeEnvelope(r.Value); err == nil {
		e.Envelope = &env
	} else {
		e.EnvelopeError = err.Error()
	}
	for _, h := range r.Headers {
		e.Headers[h.Key] = string(h.Value)
	}
	return e
}

// orDash is s, or "-" when s is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeEntry prints e for a person: a heading line and indented details.
// Every field from the message (key, headers, envelope) goes through
// term.Printable: the message cannot write a control character to the
// terminal nor a line of its own.
func writeEntry(w io.Writer, e entry) {
	attempts := "-"
	if e.Attempts != nil {
		attempts = strconv.Itoa(*e.Attempts)
	}
	fmt.Fprintf(w, "p%d@%d  %s  attempts %s  dead-lettered %s\n", e.Partition, e.Offset, orDash(term.Printable(e.Code)), attempts, orDash(term.Printable(e.DLQAt)))
	src := orDash(term.Printable(e.SourceTopic))
	if e.SourcePartition != nil {
		src += fmt.Sprintf(" p%d", *e.SourcePartition)
	}
	if e.SourceOffset != nil {
		src += fmt.Sprintf("@%d", *e.SourceOffset)
	}
	if e.ConsumerGroup != "" {
		src += " (group " + term.Printable(e.ConsumerGroup) + ")"
	}
	fmt.Fprintf(w, "    source    %s\n", src)
	fmt.Fprintf(w, "    reason    %s\n", orDash(term.Printable(strings.Join(strings.Fields(e.Reason), " "))))
	key := printableKey([]byte(e.Key))
	if size, omitted := e.Headers[consumer.HeaderValueOmitted]; omitted {
		fmt.Fprintf(w, "    envelope  value left out of the DLQ (%s: %s bytes): the original is at the source offset while its retention keeps it  key %s\n",
			consumer.HeaderValueOmitted, term.Printable(size), key)
	} else if e.Envelope != nil {
		fmt.Fprintf(w, "    envelope  MessageId %s  EventType %s  key %s\n", e.Envelope.MessageID, orDash(term.Printable(e.Envelope.EventType)), key)
	} else {
		fmt.Fprintf(w, "    envelope  unreadable envelope (%s)  key %s\n", term.Printable(e.EnvelopeError), key)
	}
	if e.ReplayCount > 0 {
		fmt.Fprintf(w, "    replayed  %d time(s), last at %s\n", e.ReplayCount, orDash(term.Printable(e.Headers[HeaderReplayedAt])))
	}
}

// ListOptions are the arguments of List: `dlq list`'s.
type ListOptions struct {
	Brokers, Topic string // the DLQ topic and where it is
	Filter         Filter
	Limit          int  // print at most this many messages; 0: no limit
	JSON           bool // one JSON object per message and line, every header included
}

// List prints the selected messages of a DLQ topic on out, each with its
// DLQ partition and offset, the x-dlq-* headers, its source and group, the
// reason and the envelope (MessageId, EventType, key) or why it is
// unreadable, and then a one-line count on summary. It returns how many it
// printed.
func List(ctx context.Context, o ListOptions, out, summary io.Writer) (int, error) {
	n := 0
	var encErr error
	err := read(ctx, o.Brokers, o.Topic, o.Filter, func(r *record) bool {
		e := newEntry(r)
		if o.JSON {
			// One line per message: encoding/json escapes the C0 controls
			// (newlines included) and replaces invalid UTF-8;
			// term.PrintableJSON the other unprintable characters.
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			if encErr = enc.Encode(e); encErr != nil {
				return false
			}
			if _, encErr = out.Write(term.PrintableJSON(b.Bytes())); encErr != nil {
				return false
			}
		} else {
			if n > 0 {
				fmt.Fprintln(out)
			}
			writeEntry(out, e)
		}
		n++
		return o.Limit <= 0 || n < o.Limit
	})
	if err = errors.Join(err, encErr); err != nil {
		return n, fmt.Errorf("dlq list: %w", err)
	}
	what := "message(s)"
	if o.Limit > 0 && n == o.Limit {
		what += fmt.Sprintf(" (--limit %d reached)", o.Limit)
	}
	fmt.Fprintf(summary, "%d %s of %s\n", n, what, o.Topic)
	return n, nil
}
