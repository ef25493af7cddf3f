package dlq

import (
	"testing"
	"time"
)

func TestParseOffsetRangeAndSince(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ranges := []struct {
		in       string
		from, to int64
		bad      bool
	}{
		{"3-9", 3, 9, false}, {"3-", 3, -1, false}, {"-9", -1, 9, false}, {"4-4", 4, 4, false},
		{"9-3", 0, 0, true}, {"-", 0, 0, true}, {"x-1", 0, 0, true}, {"5", 0, 0, true},
	}
	for _, r := range ranges {
		from, to, err := ParseOffsetRange(r.in)
		if (err != nil) != r.bad || (!r.bad && (from != r.from || to != r.to)) {
			t.Errorf("ParseOffsetRange(%q) = %d, %d, %v", r.in, from, to, err)
		}
	}
	if got, err := ParseSince("90m", now); err != nil || !got.Equal(now.Add(-90*time.Minute)) {
		t.Errorf("ParseSince(90m) = %v, %v", got, err)
	}
	if got, err := ParseSince("2026-11-30T10:00:00Z", now); err != nil || !got.Equal(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("ParseSince(RFC 3339) = %v, %v", got, err)
	}
	for _, bad := range []string{"yesterday", "-1h", "0s"} {
		if _, err := ParseSince(bad, now); err == nil {
			t.Errorf("ParseSince(%q) accepted", bad)
		}
	}
}
