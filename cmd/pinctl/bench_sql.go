package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pin-platform/pin/migrate/localpg"
)

// The SQL limit of a consumer: its per-event SQL as pgbench scripts, one
// event per transaction — the idempotency SELECT, the handler's statements
// in the shapes the consumer sends them (read off the server log of a
// `pinctl dev` run: ent's column lists, LIMIT 2, RETURNING, the re-SELECT
// after an UpdateOneID) and the mark INSERT — weighted like the load's mix.
// Fresh ids come from gen_random_uuid(); ids that a transaction uses twice
// (the idempotency key, a bond id) from a `\set` random number through
// md5(…)::uuid, and rows that must exist (seeded bonds, chats, leads) from
// `\set` picks among ids seeded as md5('<prefix>' || i)::uuid. Rows read by
// the handler are read with `\gset` into the variables the next statements
// use, as the handler does (no extra round trip).

// benchSeedBonds is how many Active bonds the rewards SQL limit closes and
// re-reads (the close and stale scripts).
const benchSeedBonds = 10000

// pgbenchScript is one weighted pgbench script (`-f file@weight`).
type pgbenchScript struct {
	Name   string `json:"name"`
	Weight int    `json:"weight"`
	text   string
}

const markSelect = `SELECT idempotency_key FROM processed_messages WHERE idempotency_key = ANY(ARRAY[%[1]s || md5(:m::text)::uuid]);`

const markInsert = `INSERT INTO processed_messages (idempotency_key, consumer_group, topic, "partition", "offset", outcome) ` +
	`SELECT k, '%[2]s', '%[3]s', p, o, oc FROM unnest(ARRAY[%[1]s || md5(:m::text)::uuid], ARRAY[0], ARRAY[:m::bigint], ARRAY['%[4]s']::text[]) AS u(k, p, o, oc) ` +
	`ON CONFLICT (idempotency_key) DO NOTHING;`

// eventTx wraps a handler's statements into the runtime's per-event
// transaction: mark check, handler, mark, commit.
func eventTx(prefix, group, topic, outcome string, sets []string, body ...string) string {
	var b strings.Builder
	b.WriteString("\\set m random(1, 9223372036854775806)\n")
	for _, s := range sets {
		b.WriteString(s + "\n")
	}
	b.WriteString("BEGIN;\n")
	// pgbench takes any ":name" for a variable, in literals too: the
	// key prefix's colons are written as an escape.
	prefix = "E'" + strings.ReplaceAll(prefix, ":", `\x3a`) + "'"
	fmt.Fprintf(&b, markSelect+"\n", prefix)
	for _, s := range body {
		b.WriteString(s + "\n")
	}
	fmt.Fprintf(&b, markInsert+"\n", prefix, group, topic, outcome)
	b.WriteString("COMMIT;\n")
	return b.String()
}

// sqlLimit is what the SQL limit of one service needs: its seed and its
// scripts.
type sqlLimit struct {
	seed    []string // statements run once on the pgbench database
	scripts []pgbenchScript
}

// benchSQL returns the SQL limit of service over chats lead chats and leads
// CRM leads (the same counts as the consumer's load, so that the 4-client
// run contends on rows as the consumer's partitions do).
func benchSQL(service string, chats, leads int) (sqlLimit, error) {
	switch service {
	case "rewards":
		const (
			group  = "pin-rewards-referral-bonds"
			topic  = "pin.referral.bonds.v1"
			bondRO = `SELECT bond_id, referred_user_id, referrer_user_id, referrer_company_id, status, bound_at, replica_version, synced_at FROM referral_bond_replicas WHERE bond_id = %s LIMIT 2 FOR UPDATE;`
		)
		seeded := `md5('b' || :b::text)::uuid`
		return sqlLimit{
			seed: []string{fmt.Sprintf(`INSERT INTO referral_bond_replicas (bond_id, referred_user_id, referrer_user_id, status, bound_at, replica_version, synced_at)
SELECT md5('b' || i)::uuid, md5('r' || i)::uuid, gen_random_uuid(), 'Active', now(), 1, now() FROM generate_series(1, %d) i`, benchSeedBonds)},
			scripts: []pgbenchScript{
				// 75 %: a new bond. The bond id is random: no row, insert.
				{Name: "bond-created", Weight: 75, text: eventTx("rewards:bond-created:", group, topic, "created",
					[]string{`\set b random(1, 9223372036854775806)`},
					fmt.Sprintf(bondRO, `md5(:b::text)::uuid`),
					`INSERT INTO referral_bond_replicas (referred_user_id, referrer_user_id, status, bound_at, replica_version, synced_at, bond_id) `+
						`VALUES (gen_random_uuid(), gen_random_uuid(), 'Active', now(), 1, now(), md5(:b::text)::uuid) ON CONFLICT DO NOTHING RETURNING bond_id;`)},
				// 20 %: a close of an existing bond (UpdateOneID re-reads the row).
				{Name: "bond-closed", Weight: 20, text: eventTx("rewards:bond-closed:", group, topic, "closed",
					[]string{fmt.Sprintf(`\set b random(1, %d)`, benchSeedBonds)},
					fmt.Sprintf(bondRO, seeded),
					`UPDATE referral_bond_replicas SET status = 'Revoked', replica_version = replica_version + 1, synced_at = now() WHERE bond_id = `+seeded+`;`,
					`SELECT bond_id, referred_user_id, referrer_user_id, referrer_company_id, status, bound_at, replica_version, synced_at FROM referral_bond_replicas WHERE bond_id = `+seeded+`;`)},
				// 5 %: a stale repeat: read, decide, mark only.
				{Name: "bond-created-stale", Weight: 5, text: eventTx("rewards:bond-created:", group, topic, "skipped-stale",
					[]string{fmt.Sprintf(`\set b random(1, %d)`, benchSeedBonds)},
					fmt.Sprintf(bondRO, seeded))},
			},
		}, nil
	case "messenger":
		const (
			group = "messenger-lead-participants-changed"
			topic = "pin.crm.lead-participants-changed.v1"
		)
		sets := []string{fmt.Sprintf(`\set c random(1, %d)`, chats), `\set j random(3, 4)`}
		member := `md5('p' || :c::text || '-' || :j::text)::uuid`
		common := func(change []string, factType, prevRole string) []string {
			body := []string{
				`SELECT id, created_at, updated_at, kind, lead_id, lead_member_version, row_version, closed_at FROM chats WHERE lead_id = md5('l' || :c::text)::uuid LIMIT 2 \gset`,
				`SELECT id AS member_id, chat_id, user_id, role, joined_at, removed_at FROM chat_participants WHERE chat_id = :id;`,
				`UPDATE chats SET updated_at = now(), lead_member_version = :lead_member_version::bigint + 1, row_version = COALESCE(row_version, 0) + 1 WHERE id = :id AND row_version = :row_version;`,
			}
			body = append(body, change...)
			prev, prevVal := "", ""
			if prevRole != "" {
				prev, prevVal = "previous_role, ", "'"+prevRole+"', "
			}
			return append(body,
				fmt.Sprintf(`INSERT INTO chat_events (chat_id, created_at, id, occurred_at, %srole, source_message_id, type, user_id) VALUES (:id, now(), gen_random_uuid(), now(), %s'Lawyer', md5(:m::text)::uuid, '%s', gen_random_uuid()) RETURNING id;`, prev, prevVal, factType),
				`INSERT INTO chat_updates (recipient_user_ids, revoked_user_ids, created_at, chat_id, id) VALUES (ARRAY[gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid()], '{}', now(), :id, gen_random_uuid()) RETURNING id AS update_id \gset`,
				`SELECT pg_notify('chat_updates', :update_id);`,
			)
		}
		tx := func(change []string, factType, prevRole string) string {
			return eventTx("messenger-lead-participants:", group, topic, "synced", sets, common(change, factType, prevRole)...)
		}
		return sqlLimit{
			seed: []string{
				fmt.Sprintf(`INSERT INTO chats (id, kind, lead_id, lead_member_version) SELECT md5('c' || i)::uuid, 'Lead', md5('l' || i)::uuid, 1 FROM generate_series(1, %d) i`, chats),
				fmt.Sprintf(`INSERT INTO chat_participants (id, chat_id, user_id, role) SELECT md5('p' || i || '-' || j)::uuid, md5('c' || i)::uuid, md5('u' || i || '-' || j)::uuid, (ARRAY['Executor', 'InvestorPrimary', 'CoAgent', 'Lawyer'])[j] FROM generate_series(1, %d) i, generate_series(1, 4) j`, chats),
			},
			scripts: []pgbenchScript{
				{Name: "member-added", Weight: 34, text: tx([]string{
					`INSERT INTO chat_participants (chat_id, id, joined_at, role, user_id) VALUES (:id, gen_random_uuid(), now(), 'CoAgent', gen_random_uuid()) RETURNING id;`,
				}, "ParticipantJoined", "")},
				{Name: "member-removed", Weight: 33, text: tx([]string{
					`UPDATE chat_participants SET removed_at = now() WHERE id IN (` + member + `) AND removed_at IS NULL;`,
				}, "ParticipantLeft", "")},
				{Name: "role-changed", Weight: 33, text: tx([]string{
					`UPDATE chat_participants SET role = 'Lawyer' WHERE id = ` + member + `;`,
					`SELECT id, chat_id, user_id, role, joined_at, removed_at FROM chat_participants WHERE id = ` + member + `;`,
				}, "ParticipantRoleChanged", "CoAgent")},
			},
		}, nil
	case "crm":
		return sqlLimit{
			seed: []string{fmt.Sprintf(`INSERT INTO leads (id, tenant_id, executor_agent_user_id, primary_investor_user_id, status) SELECT md5('l' || i)::uuid, md5('t' || i)::uuid, md5('a' || i)::uuid, md5('i' || i)::uuid, 'Active' FROM generate_series(1, %d) i`, leads)},
			scripts: []pgbenchScript{
				// 70 % shares, 30 % opens: the same statements, another type.
				{Name: "selection-shared", Weight: 100, text: eventTx("crm:selection-shared:", "crm-selections", "pin.selections.selection-shared.v1", "attached",
					[]string{fmt.Sprintf(`\set l random(1, %d)`, leads), `\set v random(0, 9)`},
					`SELECT id, created_at, updated_at, tenant_id, executor_agent_user_id, primary_investor_user_id, status, last_event_at, row_version FROM leads WHERE (executor_agent_user_id = md5('a' || :l::text)::uuid AND primary_investor_user_id = md5('i' || :l::text)::uuid) AND status = 'Active' LIMIT 2 \gset`,
					`INSERT INTO lead_events (tenant_id, type, occurred_at, source_message_id, payload, created_at, lead_id, id) VALUES (:tenant_id, CASE WHEN :v::int < 3 THEN 'SelectionViewed' ELSE 'SelectionAttached' END, now(), md5(:m::text)::uuid, `+
						`jsonb_build_object('SelectionId', gen_random_uuid(), 'SelectionTitle', 'Selection', 'PropertyObjectsCount', 12), now(), :id, gen_random_uuid()) `+
						`ON CONFLICT (source_message_id) WHERE source_message_id IS NOT NULL DO NOTHING RETURNING id;`,
					`UPDATE leads SET updated_at = now(), row_version = COALESCE(row_version, 0) + 1, last_event_at = GREATEST(last_event_at, now()) WHERE (id = :id AND row_version = :row_version) AND status = 'Active';`)},
			},
		}, nil
	}
	return sqlLimit{}, fmt.Errorf("no SQL limit for service %q", service)
}

// pgbenchRun is one pgbench run's result.
type pgbenchRun struct {
	Clients      int     `json:"clients"`
	Transactions int     `json:"transactions"`
	Failed       int     `json:"failed"`
	Seconds      float64 `json:"seconds"`
	TPS          float64 `json:"tps"`
	LatencyMs    float64 `json:"latency_avg_ms"`
	// TimeBound: run for a fixed time (--sql-time) instead of N
	// transactions, because N would have taken longer.
	TimeBound bool `json:"time_bound"`
}

// pgbenchMode is pgbench's query protocol, the consumers': each pool
// connection prepares the statements it runs again (DATABASE_STATEMENT_CACHE),
// so the consumer is measured against prepared statements too (until
// 2026-11-30 evening, "extended": unnamed statements, parsed and planned
// every time, as the consumers then sent them).
const pgbenchMode = "prepared"

// pgbench runs the scripts (files in dir) against db of the local server.
// With tx > 0 each client runs tx transactions, else the run lasts d.
func pgbench(ctx context.Context, srv *localpg.Server, db, dir string, files []string, clients, tx int, d time.Duration) (pgbenchRun, error) {
	bin, err := localpg.BinDir()
	if err != nil {
		return pgbenchRun{}, err
	}
	args := []string{"-n", "-M", pgbenchMode, "-h", "127.0.0.1", "-p", strconv.Itoa(srv.Port()), "-U", "postgres",
		"-c", strconv.Itoa(clients), "-j", strconv.Itoa(clients)}
	if tx > 0 {
		args = append(args, "-t", strconv.Itoa(tx))
	} else {
		args = append(args, "-T", strconv.Itoa(max(1, int(d.Seconds()))))
	}
	for _, f := range files {
		args = append(args, "-f", f)
	}
	args = append(args, db)
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "pgbench"), args...)
	cmd.Dir = dir
	if os.Geteuid() == 0 { // as the server does: the postgres user, not root
		cred, err := localpg.PostgresUser() // pgbench runs as the postgres user when pinctl runs as root
		if err != nil {
			return pgbenchRun{}, err
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return pgbenchRun{}, fmt.Errorf("pgbench %s: %w\n%s", strings.Join(args, " "), err, lastLines(out.String(), 15))
	}
	r, err := parsePgbench(out.String())
	if err != nil {
		return r, fmt.Errorf("pgbench: %w\n%s", err, lastLines(out.String(), 15))
	}
	r.Clients, r.TimeBound = clients, tx == 0
	r.Seconds = time.Since(start).Seconds()
	return r, nil
}

var (
	reTPS     = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)
	reLatency = regexp.MustCompile(`(?m)^latency average = ([0-9.]+) ms`)
	reTx      = regexp.MustCompile(`(?m)^number of transactions actually processed: (\d+)`)
	reFailed  = regexp.MustCompile(`(?m)^number of failed transactions: (\d+)`)
)

// parsePgbench reads tps, average latency and the transaction counts from
// pgbench's report.
func parsePgbench(out string) (pgbenchRun, error) {
	var r pgbenchRun
	m := reTPS.FindStringSubmatch(out)
	if m == nil {
		return r, errors.New("no tps line in the output")
	}
	r.TPS, _ = strconv.ParseFloat(m[1], 64)
	if m := reLatency.FindStringSubmatch(out); m != nil {
		r.LatencyMs, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := reTx.FindStringSubmatch(out); m != nil {
		r.Transactions, _ = strconv.Atoi(m[1])
	}
	if m := reFailed.FindStringSubmatch(out); m != nil {
		r.Failed, _ = strconv.Atoi(m[1])
	}
	return r, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// sqlResult is the SQL limit of one service.
type sqlResult struct {
	Scripts  []pgbenchScript `json:"scripts"`
	Mode     string          `json:"query_mode"`
	Clients1 pgbenchRun      `json:"clients_1"`
	Clients4 pgbenchRun      `json:"clients_4"`
}

// measureSQL seeds the pgbench database, writes the scripts to dir and runs
// them with 1 and 4 clients for n transactions in all, or for maxTime when
// a 2-second calibration run says n would take longer.
func (b *bench) measureSQL(ctx context.Context, service string) (sqlResult, error) {
	lim, err := benchSQL(service, b.chats, b.leads)
	if err != nil {
		return sqlResult{}, err
	}
	res := sqlResult{Scripts: lim.scripts, Mode: pgbenchMode}
	db, err := sql.Open("postgres", b.srv.URL(benchSQLDB))
	if err != nil {
		return res, err
	}
	defer db.Close()
	for _, s := range lim.seed {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return res, fmt.Errorf("seed the SQL limit of %s: %w", service, err)
		}
	}
	if _, err := db.ExecContext(ctx, `VACUUM ANALYZE`); err != nil {
		return res, err
	}
	var files []string
	for _, s := range lim.scripts {
		path := filepath.Join(b.work, service+"-"+s.Name+".sql")
		if err := os.WriteFile(path, []byte(s.text), 0o644); err != nil {
			return res, err
		}
		files = append(files, fmt.Sprintf("%s@%d", path, s.Weight))
	}
	run := func(clients int) (pgbenchRun, error) {
		if _, err := db.ExecContext(ctx, `CHECKPOINT`); err != nil {
			return pgbenchRun{}, err
		}
		// Calibrate (and warm up): is n transactions within the time bound?
		// Not needed when n is small enough at any plausible rate.
		if float64(b.events) > 100*b.sqlTime.Seconds() {
			cal, err := pgbench(ctx, b.srv, benchSQLDB, b.work, files, clients, 0, 2*time.Second)
			if err != nil {
				return cal, err
			}
			if cal.TPS > 0 && float64(b.events)/cal.TPS > b.sqlTime.Seconds() {
				return pgbench(ctx, b.srv, benchSQLDB, b.work, files, clients, 0, b.sqlTime)
			}
		}
		return pgbench(ctx, b.srv, benchSQLDB, b.work, files, clients, max(1, b.events/clients), 0)
	}
	b.say("  SQL limit: pgbench, 1 client …")
	if res.Clients1, err = run(1); err != nil {
		return res, err
	}
	b.say("  SQL limit: pgbench, 4 clients …")
	if res.Clients4, err = run(4); err != nil {
		return res, err
	}
	return res, nil
}
