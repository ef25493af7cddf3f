package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pin-platform/pin/consumers/demo"
)

// pacedRate is the paced run's rate: half the measured one, or --paced-rate.
func (b *benchmark) pacedRate(r *serviceResult) float64 {
	if b.Rate > 0 {
		return b.Rate
	}
	return r.Consumer.AssignedEPS / 2
}

// pacedRun produces at pacedRate for --paced and samples the committed
// offsets every 5 ms until every paced message is committed. The CPU
// figures cover the same span: first produce to last commit.
func (b *benchmark) pacedRun(ctx context.Context, pid int, w *offsetWatcher, next func() demo.Event, r *serviceResult) ([]produced, [][]commitObs, error) {
	rate := b.pacedRate(r)
	count := max(1, int(rate*b.Paced.Seconds()))
	r.Paced.TargetEPS, r.Paced.Events, r.Paced.FixedRate = rate, count, b.Rate > 0
	s := startCommitSampler(w, 5*time.Millisecond)
	cpu0, cpu0At := takeCPU(pid, b.postmaster), time.Now()
	recs, err := pacedProduce(ctx, b.brokers, next, count, rate)
	if err != nil {
		s.close()
		return nil, nil, err
	}
	if span := recs[len(recs)-1].at.Sub(recs[0].at); span > 0 {
		r.Paced.ActualEPS = float64(count-1) / span.Seconds()
	}
	want := map[int32]int64{}
	for _, rc := range recs {
		want[rc.partition] = max(want[rc.partition], rc.offset+1)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		cur := s.current()
		done := true
		for p, o := range want {
			if cur[p] < o {
				done = false
			}
		}
		if done {
			cpu1, cpu1At := takeCPU(pid, b.postmaster), time.Now()
			u, consumerUs, pgUs := spanUse(cpu0, cpu1, cpu0At, cpu1At, float64(count), runtime.NumCPU())
			r.Paced.CPU, r.Paced.ConsumerUsPer, r.Paced.PGUsPer = &u, consumerUs, pgUs
			break
		}
		if time.Now().After(deadline) {
			s.close()
			return nil, nil, errors.New("paced run: not every message was committed within 2 minutes")
		}
		select {
		case <-ctx.Done():
			s.close()
			return nil, nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return recs, s.close(), nil
}

type msgPos struct {
	partition int32
	offset    int64
}

// fill computes the paced run's latency percentiles.
func (pr *pacedRun) fill(recs []produced, obs [][]commitObs, dbAt map[msgPos]time.Time) {
	var db, off []time.Duration
	var bySecond [][]time.Duration // db, by the second of the run the message was produced in
	var t0 time.Time
	if len(recs) > 0 {
		t0 = recs[0].at
	}
	for _, rc := range recs {
		if !rc.ok {
			continue
		}
		if at, ok := dbAt[msgPos{rc.partition, rc.offset}]; ok {
			db = append(db, at.Sub(rc.at))
			sec := int(rc.at.Sub(t0) / time.Second)
			for len(bySecond) <= sec {
				bySecond = append(bySecond, nil)
			}
			bySecond[sec] = append(bySecond[sec], at.Sub(rc.at))
		}
		if int(rc.partition) < len(obs) {
			if at, ok := commitTime(obs[rc.partition], rc.offset); ok {
				off = append(off, at.Sub(rc.at))
			}
		}
	}
	pr.DBp50ms, pr.DBp99ms, pr.DBmaxms, pr.DBn = percentiles(db)
	pr.DBp99BySecondMs = nil
	if len(bySecond) > 1 {
		// The last second is whole when the run's last message was due
		// no earlier than one interval before its end.
		var every time.Duration
		if pr.TargetEPS > 0 {
			every = time.Duration(float64(time.Second) / pr.TargetEPS)
		}
		if recs[len(recs)-1].at.Sub(t0)+every < time.Duration(len(bySecond))*time.Second {
			bySecond = bySecond[:len(bySecond)-1]
		}
	}
	for _, ds := range bySecond {
		_, p99, _, n := percentiles(ds)
		var v *float64
		if n > 0 {
			v = new(math.Round(p99*10) / 10)
		}
		pr.DBp99BySecondMs = append(pr.DBp99BySecondMs, v)
	}
	pr.Offp50ms, pr.Offp99ms, pr.Offmaxms, pr.Offn = percentiles(off)
	pr.Stalls, pr.LongestStallMs = stalls(recs, dbAt)
}

// stallGap is the shortest pause counted as a stall: at half load a
// message is produced every few tens of µs and some lane commits every
// few ms.
const stallGap = 50 * time.Millisecond

// stalls counts the gaps of stallGap or more between consecutive
// database commits of the run's messages (their outcome lines, whatever
// the partition) that a message waited through (produced before the gap
// began, committed at its end: at a low rate the consumer may just have
// had nothing to do), and returns the longest (ms).
func stalls(recs []produced, dbAt map[msgPos]time.Time) (int, float64) {
	type done struct{ produced, committed time.Time }
	var ds []done
	for _, rc := range recs {
		if t, ok := dbAt[msgPos{rc.partition, rc.offset}]; ok && rc.ok {
			ds = append(ds, done{rc.at, t})
		}
	}
	slices.SortFunc(ds, func(a, b done) int { return a.committed.Compare(b.committed) })
	n, longest := 0, time.Duration(0)
	for i := 1; i < len(ds); i++ {
		gap := ds[i].committed.Sub(ds[i-1].committed)
		if gap < stallGap || ds[i].produced.After(ds[i-1].committed) {
			continue
		}
		n++
		longest = max(longest, gap)
	}
	return n, float64(longest.Microseconds()) / 1000
}

// writePacedCSV writes each paced message's times (for --keep): produced,
// committed in the database, offset committed, in ms since the first.
func writePacedCSV(path string, recs []produced, obs [][]commitObs, dbAt map[msgPos]time.Time) error {
	if len(recs) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("partition,offset,produced_ms,acked_ms,db_commit_ms,offset_commit_ms\n")
	t0 := recs[0].at
	ms := func(t time.Time, ok bool) string {
		if !ok {
			return ""
		}
		return strconv.FormatFloat(float64(t.Sub(t0))/float64(time.Millisecond), 'f', 3, 64)
	}
	for _, rc := range recs {
		db, okDB := dbAt[msgPos{rc.partition, rc.offset}]
		var off time.Time
		okOff := false
		if int(rc.partition) < len(obs) {
			off, okOff = commitTime(obs[rc.partition], rc.offset)
		}
		fmt.Fprintf(&b, "%d,%d,%s,%s,%s,%s\n", rc.partition, rc.offset, ms(rc.at, true), ms(rc.acked, rc.ok), ms(db, okDB), ms(off, okOff))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// setFromMetrics sets the paced run's transactions and its offset commits
// right after a store (storedCommits) from the consumer's metrics after
// it, less the max run's (scraped at its end, right before).
func (pr *pacedRun) setFromMetrics(m map[string]float64, maxRun *consumerRun) {
	if n := m["pin_consumer_batch_size_count"] - maxRun.Batches; n > 0 {
		pr.Batches = n
		pr.MeanBatch = (m["pin_consumer_batch_size_sum"] - maxRun.BatchedEvents) / n
	}
	pr.OffsetCommits = storedCommits(m) - maxRun.OffsetCommits
	pr.Stages = stageTimes(m, maxRun.metrics)
}

// summarizeSeconds says how the per-second p99s of a paced run compare
// with the target: the median second, the worst one and when it was, and
// how many seconds were within the target.
func summarizeSeconds(p99s []*float64, target time.Duration) string {
	limit := float64(target) / float64(time.Millisecond)
	var measured []float64
	worst, within := -1, 0
	for i, v := range p99s {
		if v == nil { // no outcome line from that second: not counted
			continue
		}
		measured = append(measured, *v)
		if worst < 0 || *v > *p99s[worst] {
			worst = i
		}
		if *v <= limit {
			within++
		}
	}
	if len(measured) == 0 {
		return ""
	}
	slices.Sort(measured)
	s := fmt.Sprintf("median second %s, worst %s (second %d); %d of %d seconds ≤ %s",
		fmtMs(measured[(len(measured)-1)/2]), fmtMs(*p99s[worst]), worst, within, len(measured), fmtMs(limit))
	if n := len(p99s) - len(measured); n > 0 {
		s += fmt.Sprintf(" (%d without outcome lines)", n)
	}
	return s
}

// percentiles returns p50, p99 and max in milliseconds (nearest rank).
func percentiles(ds []time.Duration) (p50, p99, mx float64, n int) {
	if len(ds) == 0 {
		return math.NaN(), math.NaN(), math.NaN(), 0
	}
	slices.Sort(ds)
	rank := func(q float64) float64 {
		i := max(int(math.Ceil(q*float64(len(ds))))-1, 0)
		return float64(ds[i]) / float64(time.Millisecond)
	}
	return rank(0.50), rank(0.99), float64(ds[len(ds)-1]) / float64(time.Millisecond), len(ds)
}
