package dlq

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pin-platform/pin/consumers/consumer"
)

// Filter selects DLQ messages. All() selects every message; a field at its
// zero value (or -1 where it says so) does not narrow the selection.
type Filter struct {
	Code      string    // x-dlq-error-code equal to this
	Since     time.Time // dead-lettered (x-dlq-at) at or after this
	Partition int32     // this DLQ partition only; -1: all
	From, To  int64     // DLQ offsets within [From, To]; -1: unbounded
}

// All is the filter that selects every message.
func All() Filter { return Filter{Partition: -1, From: -1, To: -1} }

func (f Filter) match(r *record) bool {
	if f.Code != "" && r.header(consumer.HeaderErrorCode) != f.Code {
		return false
	}
	if !f.Since.IsZero() && r.deadLetteredAt().Before(f.Since) {
		return false
	}
	return true
}

// ParseSince reads an RFC 3339 time or a positive duration back from now.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a positive duration", s)
	}
	return now.Add(-d), nil
}

// ParseOffsetRange reads "a-b", "a-" or "-b" (inclusive); an open end is
// -1.
func ParseOffsetRange(s string) (from, to int64, err error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, fmt.Errorf("%q: want a-b", s)
	}
	from, to = -1, -1
	if a != "" {
		if from, err = strconv.ParseInt(a, 10, 64); err != nil || from < 0 {
			return 0, 0, fmt.Errorf("%q: %q is not an offset", s, a)
		}
	}
	if b != "" {
		if to, err = strconv.ParseInt(b, 10, 64); err != nil || to < 0 {
			return 0, 0, fmt.Errorf("%q: %q is not an offset", s, b)
		}
	}
	if a == "" && b == "" {
		return 0, 0, fmt.Errorf("%q: want a-b", s)
	}
	if from >= 0 && to >= 0 && to < from {
		return 0, 0, fmt.Errorf("%q: the range is empty", s)
	}
	return from, to, nil
}
