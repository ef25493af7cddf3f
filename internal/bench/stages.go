package bench

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The runtime's stage histograms: a message's waits before its first
// transaction (per message), then its transaction's stages (per
// transaction), in the order a message meets them.
const (
	waitFamily    = "pin_consumer_wait_seconds"
	txStageFamily = "pin_consumer_transaction_stage_seconds"
)

var (
	waitStages = []string{"partition", "lane"}
	txStages   = []string{"begin", "read", "decide", "marks", "write", "commit"}
)

// stageTime is one stage's time over a run: how many times it was
// observed, its mean, and its p99 interpolated in the histogram's bucket
// as PromQL's histogram_quantile does.
type stageTime struct {
	Count  float64 `json:"count"`
	MeanMs float64 `json:"mean_ms"`
	P99Ms  float64 `json:"p99_ms"`
}

// stageTimes reads the stage histograms of scrape m, less those of the
// earlier scrape before (nil: from the process's start). A binary without
// the histograms gives nil.
func stageTimes(m, before map[string]float64) map[string]stageTime {
	out := map[string]stageTime{}
	for _, f := range []struct {
		family string
		stages []string
	}{{waitFamily, waitStages}, {txStageFamily, txStages}} {
		for _, stage := range f.stages {
			label := `stage="` + stage + `"`
			n := seriesWith(m, f.family+"_count", label) - seriesWith(before, f.family+"_count", label)
			if n <= 0 {
				continue
			}
			sum := seriesWith(m, f.family+"_sum", label) - seriesWith(before, f.family+"_sum", label)
			p99 := quantile(0.99, buckets(m, before, f.family, label))
			if math.IsNaN(p99) { // no buckets: JSON has no NaN
				p99 = 0
			}
			out[stage] = stageTime{Count: n, MeanMs: sum / n * 1e3, P99Ms: p99 * 1e3}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// bucket is a histogram bucket: the count of observations ≤ le.
type bucket struct{ le, count float64 }

// buckets are the buckets of family's series with label, in m less
// before, by upper bound.
func buckets(m, before map[string]float64, family, label string) []bucket {
	var out []bucket
	prefix := family + "_bucket{"
	for k, v := range m {
		have, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		pairs := strings.Split(strings.TrimSuffix(have, "}"), ",")
		if !slices.Contains(pairs, label) {
			continue
		}
		for _, p := range pairs {
			if s, ok := strings.CutPrefix(p, `le="`); ok {
				le, err := strconv.ParseFloat(strings.TrimSuffix(s, `"`), 64)
				if err == nil {
					out = append(out, bucket{le, v - before[k]})
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b bucket) int { return compareFloat(a.le, b.le) })
	return out
}

func compareFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// quantile is the q-quantile of cumulative buckets bs (the last one +Inf),
// interpolated linearly within its bucket; one in the +Inf bucket is the
// highest finite bound. NaN without observations.
func quantile(q float64, bs []bucket) float64 {
	if len(bs) == 0 || bs[len(bs)-1].count <= 0 {
		return math.NaN()
	}
	rank := q * bs[len(bs)-1].count
	lower, below := 0.0, 0.0
	for _, b := range bs {
		if b.count >= rank {
			if math.IsInf(b.le, 1) {
				return lower
			}
			if b.count == below {
				return b.le
			}
			return lower + (b.le-lower)*(rank-below)/(b.count-below)
		}
		lower, below = b.le, b.count
	}
	return lower
}

// stageLine is a run's stages as the table prints them: mean / p99 in
// ms, the waits first, then the transaction's.
func stageLine(st map[string]stageTime) string {
	part := func(names []string) string {
		var out []string
		for _, n := range names {
			if s, ok := st[n]; ok {
				out = append(out, fmt.Sprintf("%s %s / %s", n, msString(s.MeanMs), msString(s.P99Ms)))
			}
		}
		return strings.Join(out, " · ")
	}
	w, t := part(waitStages), part(txStages)
	switch {
	case w == "":
		return "transaction " + t
	case t == "":
		return "waits " + w
	}
	return "waits " + w + "; transaction " + t
}

// msString prints a time in ms with two significant figures' worth of
// decimals below 10 ms.
func msString(ms float64) string {
	switch {
	case math.IsNaN(ms):
		return "?"
	case ms < 1:
		return strconv.FormatFloat(ms, 'f', 2, 64)
	case ms < 10:
		return strconv.FormatFloat(ms, 'f', 1, 64)
	}
	return strconv.FormatFloat(ms, 'f', 0, 64)
}
