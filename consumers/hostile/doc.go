// Package hostile holds the tests that feed each consumer input meant to
// hurt it — a NUL character, invalid UTF-8, JSON nested past any sane
// depth, times in year 9999, lists of ten thousand members, garbage event
// types — and check that each ends with its code in the DLQ, or counted
// under a bounded label, and never as a processing failure, a stalled
// partition or a negative lag.
package hostile
