package bench

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// table prints one consumer's results.
func (b *benchmark) table(r *serviceResult) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := r.Consumer
	fmt.Fprintf(b.Out, "\n═══ %s · %s · %d partitions · %s events ═══\n", r.Service, r.Topic, r.Partitions, thousands(float64(r.Events)))
	w := tabwriter.NewWriter(b.Out, 2, 4, 2, ' ', 0)
	fmt.Fprintf(w, "  measure\tvalue\ttarget\tnotes\n")
	fmt.Fprintf(w, "  broker only (consumer's Kafka config, no database)\t%s ev/s\t\t%s events; start → commit %s ev/s (join %.1f s)\n",
		thousands(r.BrokerOnly.AssignedEPS), thousands(float64(r.BrokerOnly.Events)), thousands(r.BrokerOnly.EPS), r.BrokerOnly.JoinSeconds)
	feed := "all pre-produced"
	if r.PreProduced < r.Events {
		feed = fmt.Sprintf("%s pre-produced, the rest fed ahead (backlog ≥ %s)", thousands(float64(r.PreProduced)), thousands(float64(c.MinBacklog)))
	}
	fmt.Fprintf(w, "  consumer: assigned → last offset committed\t%s ev/s\t\tstart → commit %s ev/s in %.1f s (join %.1f s); db commits %s ev/s; %s\n",
		thousands(c.AssignedEPS), thousands(c.EPS), c.Seconds, c.JoinSeconds, thousands(c.SteadyEPS), feed)
	for _, t := range r.Targets {
		if t.Name == targetPacedDB {
			rate := "produced at " + thousands(r.Paced.ActualEPS) + " ev/s"
			if r.Paced.FixedRate {
				rate += " (--paced-rate, not half the measured rate)"
			}
			fmt.Fprintf(w, "  paced at %s ev/s: %s events\t\t\t%s\n", thousands(r.Paced.TargetEPS), thousands(float64(r.Paced.Events)), rate)
			fmt.Fprintf(w, "    p50 / p99 produce → database commit\t%s / %s\t\tmax %s\n", fmtMs(r.Paced.DBp50ms), fmtMs(r.Paced.DBp99ms), fmtMs(r.Paced.DBmaxms))
			fmt.Fprintf(w, "    p50 / p99 produce → offset commit\t%s / %s\t\tmax %s\n", fmtMs(r.Paced.Offp50ms), fmtMs(r.Paced.Offp99ms), fmtMs(r.Paced.Offmaxms))
			if s := summarizeSeconds(r.Paced.DBp99BySecondMs, targetP99); s != "" {
				fmt.Fprintf(w, "    p99 → database commit, second by second\t%s\n", s)
			}
			if r.Paced.Stalls > 0 {
				fmt.Fprintf(w, "    no commit on any partition for ≥ %d ms\t%d times, longest %s\n", stallGap.Milliseconds(), r.Paced.Stalls, fmtMs(r.Paced.LongestStallMs))
			}
		}
		verdict := mark(t.Met)
		if t.NA {
			verdict = "– not measured"
		}
		if t.Why != "" {
			verdict += ": " + t.Why
		}
		fmt.Fprintf(w, "    %s\t%s\t%s\t%s\n", t.Name, t.Value, t.Target, verdict)
	}
	fmt.Fprintf(w, "  per event: wall / consumer CPU / PostgreSQL CPU\t%.0f / %.0f / %.0f µs\tflat 10k → 1M\tcompare runs of several N\n", c.WallUsPer, c.CPUUsPer, c.PGUsPer)
	fmt.Fprintf(w, "  CPU per event, consumer + PostgreSQL\t%.0f µs\t\tthe ceiling's cost\n", c.CPUUsPer+c.PGUsPer)
	w.Flush()
	fmt.Fprintf(b.Out, "  CPU during the max run (cores of %d): consumer %.2f · PostgreSQL %.2f · pinctl+broker %.2f · other processes %.2f · the hypervisor %.2f\n",
		c.CPU.Cores, c.CPU.Consumer, c.CPU.Postgres, c.CPU.Pinctl, c.CPU.Others, c.CPU.Stolen)
	if l := ceilingLine(c.Ceiling, c.CPU); l != "" {
		fmt.Fprintf(b.Out, "  %s\n", l)
	}
	if l := steadyLine(c.Steady); l != "" {
		fmt.Fprintf(b.Out, "  %s\n", l)
	}
	if px := c.DBProxy; px != nil {
		fmt.Fprintf(b.Out, "  PostgreSQL %s away (--db-latency): over the max run the proxy forwarded %.2f chunks per event to it and %.2f back (about one each way per round trip)\n",
			b.DBLatency, px.ToPostgres, px.FromPostgres)
	}
	if p := r.Paced.CPU; p != nil {
		fmt.Fprintf(b.Out, "  CPU during the paced run (cores of %d): consumer %.2f · PostgreSQL %.2f · pinctl+broker %.2f · other processes %.2f · the hypervisor %.2f · machine idle %.0f %%\n",
			p.Cores, p.Consumer, p.Postgres, p.Pinctl, p.Others, p.Stolen, 100*p.Idle)
	}
	for _, n := range []string{stolenNote("max run", &c.CPU), stolenNote("paced run", r.Paced.CPU), pausedNote("max run", &c.CPU), pausedNote("paced run", r.Paced.CPU)} {
		if n != "" {
			fmt.Fprintf(b.Out, "  ! %s\n", n)
		}
	}
	if pc := r.Paced; pc.CPU != nil && pc.Batches > 0 {
		commits := ""
		if pc.OffsetCommits > 0 { // a binary from before the counter exports none
			commits = ", " + thousands(pc.OffsetCommits) + " offset commits"
		}
		fmt.Fprintf(b.Out, "  paced run: %s batch transactions (mean %.1f events)%s; per event: consumer %.0f µs, PostgreSQL %.0f µs (max run: %.0f, %.0f)\n",
			thousands(pc.Batches), pc.MeanBatch, commits, pc.ConsumerUsPer, pc.PGUsPer, c.CPUUsPer, c.PGUsPer)
	}
	if len(c.Stages) > 0 {
		fmt.Fprintf(b.Out, "  max run, where the time goes (mean / p99 ms): %s\n", stageLine(c.Stages))
	}
	if len(r.Paced.Stages) > 0 {
		fmt.Fprintf(b.Out, "  paced run, where the time goes (mean / p99 ms): %s\n", stageLine(r.Paced.Stages))
	}
	var outs []string
	for k, v := range c.Outcomes {
		outs = append(outs, fmt.Sprintf("%s %s", k, thousands(float64(v))))
	}
	sort.Strings(outs)
	split := ""
	if c.RSSAnonMiB+c.RSSFileMiB > 0 {
		split = fmt.Sprintf(" (anonymous %.1f, files %.1f)", c.RSSAnonMiB, c.RSSFileMiB)
	}
	fmt.Fprintf(b.Out, "  max run: %s of %s events committed in %s batch transactions (mean %.1f); memory after it: RSS %.1f MiB%s, Go runtime %.1f MiB (heap in use %.1f)\n",
		thousands(c.BatchedEvents), thousands(float64(r.Events)), thousands(c.Batches), c.MeanBatch, c.RSSNowMiB, split, c.GoSysMiB, c.GoHeapMiB)
	if sc := r.StatementCache; sc.Hits+sc.Misses > 0 {
		fmt.Fprintf(b.Out, "  statement cache over both runs: %s statements run prepared, %s prepared, %s run unprepared (first sight), %s evicted\n",
			thousands(sc.Hits), thousands(sc.Misses), thousands(sc.First), thousands(sc.Evicted))
	}
	fmt.Fprintf(b.Out, "  marks by outcome: %s; dead-lettered %d; parked %d\n", strings.Join(outs, " · "), c.DLQ, c.Parked)
	if len(c.Warnings) > 0 {
		var ws []string
		for k, v := range c.Warnings {
			ws = append(ws, fmt.Sprintf("%s ×%d", k, v))
		}
		sort.Strings(ws)
		fmt.Fprintf(b.Out, "  log warnings: %s\n", strings.Join(ws, "; "))
	}
}

func fmtMs(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	if v >= 100 {
		return fmt.Sprintf("%.0f ms", v)
	}
	return fmt.Sprintf("%.1f ms", v)
}

// thousands formats v rounded, with thin groups: 12,345.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

func mark(ok bool) string {
	if ok {
		return "✔ met"
	}
	return "✘ missed"
}
