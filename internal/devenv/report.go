package devenv

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pin-platform/pin/consumers/crm"
	"github.com/pin-platform/pin/consumers/demo"
	"github.com/pin-platform/pin/internal/kafkaenv"
	"github.com/pin-platform/pin/internal/term"
	"github.com/pin-platform/pin/migrate"
)

// follow turns a consumer's JSON log lines into one line per processed
// event, and passes warnings and errors through. What it prints of a log
// line (fields that may come from a message: EventType, ids, errors) goes
// through term.Printable.
func (d *devEnv) follow(p *Consumer, r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		var ev map[string]any
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			d.say("  %-9s %s", p.Service, term.Printable(strings.ReplaceAll(sc.Text(), "\t", "    ")))
			continue
		}
		if d.opts.Quiet {
			continue
		}
		str := func(k string) string {
			if v, ok := ev[k]; ok && v != nil {
				return term.Printable(fmt.Sprint(v))
			}
			return ""
		}
		if out := str("outcome"); out != "" {
			if d.opts.Events > 0 && out != "dead-lettered" && out != "parked" && str("level") == "info" && strings.HasPrefix(out, "applied") {
				continue
			}
			var extra []string
			for _, k := range []string{"code", "BondId", "Status", "LeadId", "ChatId", "added", "removed", "roleChanged", "SelectionId", "Action", "Version"} {
				if v := str(k); v != "" {
					extra = append(extra, k+"="+shortID(v))
				}
			}
			d.say("  %-9s %s[%s]@%-4s %-34s %-24s %s", p.Service, shortTopic(p.Service), str("partition"), str("offset"),
				str("EventType"), out, strings.Join(extra, " "))
			continue
		}
		if lvl := str("level"); lvl == "warn" || lvl == "error" {
			d.say("  %-9s %s: %s %s", p.Service, lvl, str("message"), str("error"))
		}
	}
	// A line too long for the scanner ends the loop: keep draining, so
	// that the process's output never blocks it.
	_, _ = io.Copy(io.Discard, r)
}

func shortTopic(service string) string {
	for _, t := range demo.Topics {
		if t.Service == service {
			return t.Name
		}
	}
	return service
}

func shortID(v string) string {
	if len(v) == 36 && strings.Count(v, "-") == 4 {
		return v[:8]
	}
	return v
}

// dlqCodes reads the DLQ messages past the given watermarks, by code.
func (d *devEnv) dlqCodes(topic string, from map[int32]int64) map[string]int {
	codes := map[string]int{}
	c, err := kafka.NewConsumer(kafkaenv.Client(d.brokers, kafka.ConfigMap{"group.id": "pinctl-dev-dlq", "enable.auto.commit": false}))
	if err != nil {
		return codes
	}
	defer c.Close()
	var tps []kafka.TopicPartition
	want := 0
	for p, o := range from {
		_, hi, err := c.QueryWatermarkOffsets(topic, p, 5000)
		if err != nil || hi <= o {
			continue
		}
		want += int(hi - o)
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(o)})
	}
	if len(tps) == 0 {
		return codes
	}
	if err := c.Assign(tps); err != nil {
		return codes
	}
	deadline := time.Now().Add(10 * time.Second)
	for n := 0; n < want && time.Now().Before(deadline); {
		if m, ok := c.Poll(100).(*kafka.Message); ok {
			n++
			for _, h := range m.Headers {
				if h.Key == "x-dlq-error-code" {
					codes[string(h.Value)]++
				}
			}
		}
	}
	return codes
}

func (d *devEnv) checkDLQ(sc *demo.Scenario, start map[string]map[int32]int64) []string {
	var bad []string
	for topic, want := range sc.DLQ {
		got := d.dlqCodes(topic, start[topic])
		for code, n := range want {
			if got[code] != n {
				bad = append(bad, fmt.Sprintf("%s: %d × %s, want %d", topic, got[code], term.Printable(code), n))
			}
		}
		for code, n := range got {
			if _, ok := want[code]; !ok && d.opts.Events == 0 {
				bad = append(bad, fmt.Sprintf("%s: %d unexpected × %s", topic, n, term.Printable(code)))
			}
		}
	}
	return bad
}

// summary prints what the database and the DLQs hold now.
func (d *devEnv) summary(procs []*Consumer) {
	ctx := context.Background()
	w := tabwriter.NewWriter(d.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "\n═══ summary (the whole database, earlier runs included) ═══")
	rows := func(title, query string) {
		fmt.Fprintf(w, "\n%s\n", title)
		r, err := d.db.QueryContext(ctx, query)
		if err != nil {
			fmt.Fprintf(w, "  error: %v\n", err)
			return
		}
		defer r.Close()
		cols, _ := r.Columns()
		fmt.Fprintf(w, "  %s\n", strings.Join(cols, "\t"))
		for r.Next() {
			vals := make([]sql.NullString, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := r.Scan(ptrs...); err != nil {
				return
			}
			s := make([]string, len(vals))
			for i, v := range vals {
				s[i] = term.Printable(v.String)
			}
			fmt.Fprintf(w, "  %s\n", strings.Join(s, "\t"))
		}
	}
	rows("rewards · referral_bond_replicas", `SELECT status, count(*) AS bonds FROM referral_bond_replicas GROUP BY status ORDER BY status`)
	rows("messenger · lead chats", `SELECT count(DISTINCT c.id) AS chats,
		count(p.id) FILTER (WHERE p.removed_at IS NULL) AS active_members,
		count(p.id) FILTER (WHERE p.removed_at IS NOT NULL) AS removed_members,
		(SELECT count(*) FROM chat_events) AS feed_facts,
		(SELECT count(*) FROM chat_updates) AS realtime_updates
		FROM chats c LEFT JOIN chat_participants p ON p.chat_id = c.id WHERE c.kind = 'Lead'`)
	rows("crm · lead_events", `SELECT type, count(*) AS events FROM lead_events GROUP BY type ORDER BY type`)
	rows("processed_messages (idempotency marks)", `SELECT consumer_group, outcome, count(*) AS messages FROM processed_messages GROUP BY 1, 2 ORDER BY 1, 2`)
	rows("parked_messages (waiting to retry)", `SELECT consumer_group, error_code, count(*) FROM parked_messages GROUP BY 1, 2 ORDER BY 1, 2`)

	fmt.Fprintf(w, "\nDLQs\n  topic\tcode\tmessages\n")
	all := map[int32]int64{}
	for _, t := range demo.Topics {
		for p := 0; p < t.Partitions; p++ {
			all[int32(p)] = 0
		}
		codes := d.dlqCodes(t.DLQ, all)
		keys := make([]string, 0, len(codes))
		for k := range codes {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %s\t%s\t%d\n", t.DLQ, term.Printable(k), codes[k])
		}
	}
	fmt.Fprintln(w, "\nwhere to look")
	for _, p := range procs {
		fmt.Fprintf(w, "  %s\thttp://%s/metrics  /healthz  /readyz\n", p.Service, p.Addr)
	}
	fmt.Fprintf(w, "  database\tpsql '%s'\n", migrate.Redact(d.dbURL))
	fmt.Fprintf(w, "  DLQ\tKAFKA_BOOTSTRAP_SERVERS=%s bin/pinctl dlq list --topic %s (while this runs)\n", d.brokers, crm.DLQTopic)
	w.Flush()
}
