package messenger

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/consumers/servicetest"
)

// Each test below is one acceptance criterion of the spec, end to end: the
// envelope is produced on the mock cluster, the consumer runs as in
// production (consumertest.Start(New)), and the test reads PostgreSQL, the
// committed offsets and, where the criterion dead-letters, the DLQ.

// AC1: new UserId in ActiveParticipants → added, ParticipantJoined,
// chat_updates row, lead_member_version = Version.
func TestAC01_NewUserIsAdded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, consumertest.Options{})
	lead, agent, investor := uuid.New(), uuid.New(), uuid.New()
	chatID := e.provision(lead)

	v1 := newEv(lead, 1, member{agent, RoleExecutor})
	v2 := newEv(lead, 2, member{agent, RoleExecutor}, member{investor, RoleInvestorPrimary}).
		with(change{User: investor, Type: ChangeAdded, Role: RoleInvestorPrimary})
	tps := e.produce(v1, v2)
	e.awaitOutcome(v1.ID, Synced)
	e.awaitOutcome(v2.ID, Synced)
	e.awaitCommitted(tps...)

	checkActive(t, e.DB, chatID, member{agent, RoleExecutor}, member{investor, RoleInvestorPrimary})
	if s := e.chat(chatID); s.LeadMemberVersion.Int64 != 2 || s.RowVersion != 2 {
		t.Fatalf("chat %+v, want lead_member_version 2, row_version 2", s)
	}
	evs := e.eventsOfMessage(chatID, v2.ID)
	if len(evs) != 1 || evs[0].Type != EventParticipantJoined || evs[0].UserID != investor ||
		evs[0].Role != RoleInvestorPrimary || evs[0].PreviousRole.Valid || !evs[0].OccurredAt.Equal(v2.ChangedAt) {
		t.Fatalf("facts of v2: %+v", evs)
	}
	ps := e.pushes(chatID)
	if len(ps) != 2 {
		t.Fatalf("%d chat_updates rows, want one per applied change (2)", len(ps))
	}
	if last := ps[1]; !sameIDs(last.Recipients, []uuid.UUID{agent, investor}) || len(last.Revoked) != 0 || last.Pushed {
		t.Fatalf("chat_updates of v2: %+v", last)
	}
	if n := e.Run.Counter("messenger_participants_added_total", nil); n != 2 {
		t.Fatalf("messenger_participants_added_total = %v, want 2", n)
	}
}

// AC2: a previously active member missing → removed_at set,
// ParticipantLeft, the member in revoked_user_ids.
func TestAC02_MissingMemberIsRemoved(t *testing.T) {
	t.Parallel()
	e := newEnv(t, consumertest.Options{})
	lead, agent, lawyer := uuid.New(), uuid.New(), uuid.New()
	chatID := e.provision(lead)

	v1 := newEv(lead, 1, member{agent, RoleExecutor}, member{lawyer, RoleLawyer})
	v2 := newEv(lead, 2, member{agent, RoleExecutor}).
		with(change{User: lawyer, Type: ChangeRemoved, Role: RoleLawyer})
	tps := e.produce(v1, v2)
	e.awaitOutcome(v2.ID, Synced)
	e.awaitCommitted(tps...)

	checkActive(t, e.DB, chatID, member{agent, RoleExecutor})
	if ps := e.participants(chatID); len(ps) != 2 {
		t.Fatalf("participants %+v: the removed member's row must stay", ps)
	}
	evs := e.eventsOfMessage(chatID, v2.ID)
	if len(evs) != 1 || evs[0].Type != EventParticipantLeft || evs[0].UserID != lawyer ||
		evs[0].Role != RoleLawyer || evs[0].PreviousRole.Valid || !evs[0].OccurredAt.Equal(v2.ChangedAt) {
		t.Fatalf("facts of v2: %+v", evs)
	}
	ps := e.pushes(chatID)
	if last := ps[len(ps)-1]; len(ps) != 2 || !sameIDs(last.Revoked, []uuid.UUID{lawyer}) || !sameIDs(last.Recipients, []uuid.UUID{agent}) {
		t.Fatalf("chat_updates %+v: want a second row revoking the lawyer, for the agent", ps)
	}
	if s := e.chat(chatID); s.LeadMemberVersion.Int64 != 2 {
		t.Fatalf("lead_member_version %v, want 2", s.LeadMemberVersion)
	}
	if n := e.Run.Counter("messenger_participants_removed_total", nil); n != 1 {
		t.Fatalf("messenger_participants_removed_total = %v, want 1", n)
	}
}

// AC3: role changed → role updated, ParticipantRoleChanged, membership
// unchanged.
func TestAC03_RoleChangeUpdatesRole(t *testing.T) {
	t.Parallel()
	e := newEnv(t, consumertest.Options{})
	lead, agent, helper := uuid.New(), uuid.New(), uuid.New()
	chatID := e.provision(lead)

	v1 := newEv(lead, 1, member{agent, RoleExecutor}, member{helper, RoleAssistant})
	v2 := newEv(lead, 2, member{agent, RoleExecutor}, member{helper, RoleCoAgent}).
		with(change{User: helper, Type: ChangeRoleChanged, Role: RoleCoAgent, PreviousRole: RoleAssistant})
	tps := e.produce(v1, v2)
	e.awaitOutcome(v2.ID, Synced)
	e.awaitCommitted(tps...)

	checkActive(t, e.DB, chatID, member{agent, RoleExecutor}, member{helper, RoleCoAgent})
	if ps := e.participants(chatID); len(ps) != 2 {
		t.Fatalf("participants %+v, want the same two rows", ps)
	}
	evs := e.eventsOfMessage(chatID, v2.ID)
	if len(evs) != 1 || evs[0].Type != EventParticipantRoleChanged || evs[0].UserID != helper ||
		evs[0].Role != RoleCoAgent || evs[0].PreviousRole.String != RoleAssistant {
		t.Fatalf("facts of v2: %+v", evs)
	}
	ps := e.pushes(chatID)
	if last := ps[len(ps)-1]; len(ps) != 2 || len(last.Revoked) != 0 || !sameIDs(last.Recipients, []uuid.UUID{agent, helper}) {
		t.Fatalf("chat_updates %+v", ps)
	}
}

// AC4: hand-over, Removed (old Executor) + ExecutorChanged (new) → old one
// removed, new one added or re-roled, exactly one Executor active.
func TestAC04_HandOverLeavesExactlyOneExecutor(t *testing.T) {
	t.Parallel()
	e := newEnv(t, consumertest.Options{})
	oneExecutor := func(t *testing.T, chatID, want uuid.UUID) {
		t.Helper()
		var execs []uuid.UUID
		for _, m := range e.active(chatID) {
			if m.Role == RoleExecutor {
				execs = append(execs, m.UserID)
			}
		}
		if len(execs) != 1 || execs[0] != want {
			t.Fatalf("active Executors %v, want exactly %s", execs, want)
		}
	}

	t.Run("to a member: re-roled", func(t *testing.T) {
		lead, old, next, inv := uuid.New(), uuid.New(), uuid.New(), uuid.New()
		chatID := e.provision(lead)
		v1 := newEv(lead, 1, member{old, RoleExecutor}, member{next, RoleCoAgent}, member{inv, RoleInvestorPrimary})
		v2 := newEv(lead, 2, member{next, RoleExecutor}, member{inv, RoleInvestorPrimary}).with(
			change{User: old, Type: ChangeRemoved, Role: RoleExecutor},
			change{User: next, Type: ChangeExecutorChanged, Role: RoleExecutor, PreviousRole: RoleCoAgent})
		tps := e.produce(v1, v2)
		e.awaitOutcome(v2.ID, Synced)
		e.awaitCommitted(tps...)

		checkActive(t, e.DB, chatID, member{next, RoleExecutor}, member{inv, RoleInvestorPrimary})
		oneExecutor(t, chatID, next)
		evs := e.eventsOfMessage(chatID, v2.ID)
		if len(evs) != 2 {
			t.Fatalf("facts of v2: %+v, want Left + RoleChanged", evs)
		}
		for _, x := range evs {
			switch x.UserID {
			case old:
				if x.Type != EventParticipantLeft || x.Role != RoleExecutor {
					t.Errorf("old Executor's fact %+v", x)
				}
			case next:
				if x.Type != EventParticipantRoleChanged || x.Role != RoleExecutor || x.PreviousRole.String != RoleCoAgent {
					t.Errorf("new Executor's fact %+v", x)
				}
			default:
				t.Errorf("unexpected fact %+v", x)
			}
		}
		ps := e.pushes(chatID)
		if last := ps[len(ps)-1]; !sameIDs(last.Revoked, []uuid.UUID{old}) || !sameIDs(last.Recipients, []uuid.UUID{next, inv}) {
			t.Fatalf("chat_updates of v2: %+v", last)
		}
	})

	t.Run("to an outsider: added", func(t *testing.T) {
		lead, old, next, inv := uuid.New(), uuid.New(), uuid.New(), uuid.New()
		chatID := e.provision(lead)
		v1 := newEv(lead, 1, member{old, RoleExecutor}, member{inv, RoleInvestorPrimary})
		v2 := newEv(lead, 2, member{inv, RoleInvestorPrimary}, member{next, RoleExecutor}).with(
			change{User: old, Type: ChangeRemoved, Role: RoleExecutor},
			change{User: next, Type: ChangeExecutorChanged, Role: RoleExecutor})
		tps := e.produce(v1, v2)
		e.awaitOutcome(v2.ID, Synced)
		e.awaitCommitted(tps...)

		checkActive(t, e.DB, chatID, member{next, RoleExecutor}, member{inv, RoleInvestorPrimary})
		oneExecutor(t, chatID, next)
		types := map[uuid.UUID]string{}
		for _, x := range e.eventsOfMessage(chatID, v2.ID) {
			types[x.UserID] = x.Type
		}
		if len(types) != 2 || types[old] != EventParticipantLeft || types[next] != EventParticipantJoined {
			t.Fatalf("facts of v2 by user: %v", types)
		}
	})
}

// AC5: Executor + CoAgent + InvestorPrimary + InvestorSecondary all active.
func TestAC05_SeveralAgentsAndInvestorsAreAllActive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, consumertest.Options{})
	lead := uuid.New()
	chatID := e.provision(lead)
	team := []member{
		{uuid.New(), RoleExecutor}, {uuid.New(), RoleCoAgent}, {uuid.New(), RoleCoAgent},
		{uuid.New(), RoleInvestorPrimary}, {uuid.New(), RoleInvestorSecondary}, {uuid.New(), RoleInvestorSecondary},
	}
	var delta []change
	for _, m := range team {
		delta = append(delta, change{User: m.UserID, Type: ChangeAdded, Role: m.Role})
	}
	v1 := newEv(lead, 1, team...).with(delta...)
	tps := e.produce(v1)
	e.awaitOutcome(v1.ID, Synced)
	e.awaitCommitted(tps...)

	checkActive(t, e.DB, chatID, team...)
	evs := e.eventsOfMessage(chatID, v1.ID)
	if len(evs) != len(team) {
		t.Fatalf("%d facts, want %d ParticipantJoined", len(evs), len(team))
	}
	for _, x := range evs {
		if x.Type != EventParticipantJoined {
			t.Fatalf("fact %+v, want ParticipantJoined", x)
		}
	}
	if ps := e.pushes(chatID); len(ps) != 1 || !sameIDs(ps[0].Recipients, userIDs(team)) {
		t.Fatalf("chat_updates %+v", ps)
	}
}

// AC6: dismissal cascade (Removed) → access and subscription revoked,
// ParticipantLeft, history kept (rows are not deleted).
func TestAC06_DismissalCascadeRevokesAccessAndKeepsHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t, consumertest.Options{})
	lead, agent, dismissed, inv := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	chatID := e.provision(lead)

	v1 := newEv(lead, 1, member{agent, RoleExecutor}, member{dismissed, RoleCoAgent}, member{inv, RoleInvestorPrimary})
	v2 := newEv(lead, 2, member{agent, RoleExecutor}, member{inv, RoleInvestorPrimary}).
		with(change{User: dismissed, Type: ChangeRemoved, Role: RoleCoAgent})
	tps := e.produce(v1, v2)
	e.awaitOutcome(v2.ID, Synced)
	e.awaitCommitted(tps...)

	checkActive(t, e.DB, chatID, member{agent, RoleExecutor}, member{inv, RoleInvestorPrimary})
	var rowID uuid.UUID
	var removed bool
	if err := e.DB.QueryRow(`SELECT id, removed_at IS NOT NULL FROM chat_participants WHERE chat_id = $1 AND user_id = $2`,
		chatID, dismissed).Scan(&rowID, &removed); err != nil || !removed {
		t.Fatalf("dismissed member's row: removed=%v err=%v, want kept with removed_at set", removed, err)
	}
	ps := e.pushes(chatID)
	last := ps[len(ps)-1]
	if !sameIDs(last.Revoked, []uuid.UUID{dismissed}) || slices.Contains(last.Recipients, dismissed) {
		t.Fatalf("chat_updates of v2 %+v: the dismissed member must be revoked and not a recipient", last)
	}
	evs := e.events(chatID)
	if len(evs) != 4 {
		t.Fatalf("feed %+v: want 3 Joined + 1 Left, nothing deleted", evs)
	}
	var joined, left bool
	for _, x := range evs {
		if x.UserID == dismissed {
			joined = joined || x.Type == EventParticipantJoined
			left = left || (x.Type == EventParticipantLeft && x.Role == RoleCoAgent && x.SourceMessageID == v2.ID)
		}
	}
	if !joined || !left {
		t.Fatalf("feed of the dismissed member: joined=%v left=%v, want both kept", joined, left)
	}

	// Re-hired later: the same row comes back (MSG-4).
	v3 := newEv(lead, 3, member{agent, RoleExecutor}, member{inv, RoleInvestorPrimary}, member{dismissed, RoleAssistant})
	tps = e.produce(v3)
	e.awaitOutcome(v3.ID, Synced)
	var again uuid.UUID
	if err := e.DB.QueryRow(`SELECT id FROM chat_participants WHERE chat_id = $1 AND user_id = $2 AND removed_at IS NULL`,
		chatID, dismissed).Scan(&again); err != nil || again != rowID {
		t.Fatalf("returning member: row %s (err %v), want the same row %s reactivated", again, err, rowID)
	}
	checkActive(t, e.DB, chatID, member{agent, RoleExecutor}, member{inv, RoleInvestorPrimary}, member{dismissed, RoleAssistant})
	e.awaitCommitted(tps...)
}

// AC7: Version ≤ lead_member_version → skipped-stale, nothing changes.
func TestAC07_StaleVersionIsSkipped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, consumertest.Options{})
	lead, a, b, c := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	chatID := e.provision(lead)

	v3 := newEv(lead, 3, member{a, RoleExecutor}, member{b, RoleLawyer})
	e.produce(v3)
	e.awaitOutcome(v3.ID, Synced)
	before := struct {
		chat           chatState
		parts          []participant
		events, pushes int
	}{e.chat(chatID), e.participants(chatID), len(e.events(chatID)), len(e.pushes(chatID))}

	older := newEv(lead, 2, member{a, RoleExecutor})
	same := newEv(lead, 3, member{a, RoleExecutor}, member{c, RoleCoAgent})
	tps := e.produce(older, same)
	e.awaitOutcome(older.ID, SkippedStale)
	e.awaitOutcome(same.ID, SkippedStale)
	e.awaitCommitted(tps...)

	if got := e.chat(chatID); got != before.chat {
		t.Fatalf("chat %+v, want unchanged %+v", got, before.chat)
	}
	if got := e.participants(chatID); !slices.Equal(got, before.parts) {
		t.Fatalf("participants %+v, want unchanged %+v", got, before.parts)
	}
	if n, m := len(e.events(chatID)), len(e.pushes(chatID)); n != before.events || m != before.pushes {
		t.Fatalf("%d facts, %d chat_updates; want unchanged %d, %d", n, m, before.events, before.pushes)
	}
	if n := e.Run.Counter("messenger_lead_participants_stale_total", nil); n != 2 {
		t.Fatalf("messenger_lead_participants_stale_total = %v, want 2", n)
	}
	if got := e.Logs.Find("skipped-stale", map[string]any{"LeadId": lead.String(), "ChatId": chatID.String()}); len(got) != 2 {
		t.Fatalf("%d skipped-stale log lines with LeadId and ChatId, want 2", len(got))
	}
}

// AC8: deltas out of order or one lost, last snapshot current → membership
// equals the last ActiveParticipants.
func TestAC08_OutOfOrderAndLostDeltasConverge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, consumertest.Options{})

	t.Run("out of order: the late older snapshot is stale", func(t *testing.T) {
		lead, a, b, c := uuid.New(), uuid.New(), uuid.New(), uuid.New()
		chatID := e.provision(lead)
		v1 := newEv(lead, 1, member{a, RoleExecutor})
		v2 := newEv(lead, 2, member{a, RoleExecutor}, member{b, RoleCoAgent}).with(change{User: b, Type: ChangeAdded, Role: RoleCoAgent})
		v3 := newEv(lead, 3, member{a, RoleExecutor}, member{c, RoleLawyer}).
			with(change{User: b, Type: ChangeRemoved, Role: RoleCoAgent}, change{User: c, Type: ChangeAdded, Role: RoleLawyer})
		tps := e.produce(v1, v3, v2) // v2 overtaken by v3
		e.awaitOutcome(v3.ID, Synced)
		e.awaitOutcome(v2.ID, SkippedStale)
		e.awaitCommitted(tps...)
		checkActive(t, e.DB, chatID, member{a, RoleExecutor}, member{c, RoleLawyer})
		for _, x := range e.events(chatID) {
			if x.UserID == b {
				t.Fatalf("fact %+v: the overtaken snapshot must leave no trace", x)
			}
		}
	})

	t.Run("a lost delta: the next snapshot carries the change", func(t *testing.T) {
		lead, a, b, c := uuid.New(), uuid.New(), uuid.New(), uuid.New()
		chatID := e.provision(lead)
		v1 := newEv(lead, 1, member{a, RoleExecutor}, member{b, RoleAssistant})
		// v2 (b → CoAgent, c added) is lost; v3 only speaks of b leaving.
		v3 := newEv(lead, 3, member{a, RoleExecutor}, member{c, RoleInvestorPrimary}).
			with(change{User: b, Type: ChangeRemoved, Role: RoleCoAgent})
		tps := e.produce(v1, v3)
		e.awaitOutcome(v3.ID, Synced)
		e.awaitCommitted(tps...)
		checkActive(t, e.DB, chatID, member{a, RoleExecutor}, member{c, RoleInvestorPrimary})
		types := map[uuid.UUID]string{}
		for _, x := range e.eventsOfMessage(chatID, v3.ID) {
			types[x.UserID] = x.Type
		}
		if len(types) != 2 || types[b] != EventParticipantLeft || types[c] != EventParticipantJoined {
			t.Fatalf("facts of v3 by user %v: want b Left and c Joined (its delta was lost)", types)
		}
		if s := e.chat(chatID); s.LeadMemberVersion.Int64 != 3 {
			t.Fatalf("lead_member_version %v, want 3", s.LeadMemberVersion)
		}
	})
}

// AC9: same MessageId again → skipped-duplicate.
func TestAC09_SameMessageIdIsSkippedAsDuplicate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, consumertest.Options{})
	lead, a, b := uuid.New(), uuid.New(), uuid.New()
	chatID := e.provision(lead)

	v1 := newEv(lead, 1, member{a, RoleExecutor})
	first := e.produce(v1)
	e.awaitOutcome(v1.ID, Synced)
	before := e.chat(chatID)

	// The same message redelivered, and a message reusing its MessageId
	// with another (newer) body: both are the same message to the consumer.
	reused := v1
	reused.Version, reused.Active = 2, []member{{a, RoleExecutor}, {b, RoleLawyer}}
	tps := e.produce(v1, reused)
	e.AwaitCounter("pin_consumer_messages_total", map[string]string{"outcome": string(consumer.SkippedDuplicate)}, 2)
	e.awaitCommitted(append(first, tps...)...)

	if got := e.chat(chatID); got != before {
		t.Fatalf("chat %+v, want unchanged %+v", got, before)
	}
	checkActive(t, e.DB, chatID, member{a, RoleExecutor})
	if n := e.Count(`SELECT count(*) FROM processed_messages`); n != 1 {
		t.Fatalf("%d idempotency marks, want 1", n)
	}
	if n, m := len(e.events(chatID)), len(e.pushes(chatID)); n != 1 || m != 1 {
		t.Fatalf("%d facts, %d chat_updates; want 1, 1", n, m)
	}
	var off int64
	if err := e.DB.QueryRow(`SELECT "offset" FROM processed_messages`).Scan(&off); err != nil || off != int64(first[0].Offset) {
		t.Fatalf("mark's offset %d (err %v), want the first delivery's %d", off, err, first[0].Offset)
	}
}

// AC10: no chat yet → MSG_CHAT_NOT_PROVISIONED, retried; chat appears →
// applied; never appears → DLQ. Waiting does not stall the other leads of
// the partition. RETRY_TIME_SCALE 0.01 stretches the schedule (1 s … 60 s,
// 303 s in all) to 3 s, long enough to look at a waiting message.
func TestAC10_ChatNotProvisionedIsRetriedThenAppliedOrDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, consumertest.Options{RetryTimeScale: 0.01})

	t.Run("applied once the chat appears; other leads of the partition go on meanwhile", func(t *testing.T) {
		early, other, a, b := uuid.New(), uuid.New(), uuid.New(), uuid.New()
		otherChat := e.provision(other)
		w1 := newEv(early, 1, member{a, RoleExecutor}).on(0)
		w2 := newEv(early, 2, member{a, RoleExecutor}, member{b, RoleInvestorPrimary}).on(0)
		o1 := newEv(other, 1, member{b, RoleExecutor}).on(0)
		tps := e.produce(w1, w2, o1)

		// The other lead's event, behind the waiting ones on partition 0,
		// is applied while they wait (the schedule gives them 3 s).
		e.awaitOutcome(o1.ID, Synced)
		checkActive(t, e.DB, otherChat, member{b, RoleExecutor})
		for _, x := range []ev{w1, w2} {
			if got := e.outcome(x.ID); got != "" {
				t.Fatalf("message %s of the unprovisioned lead has outcome %q already", x.ID, got)
			}
			if n := e.Count(`SELECT count(*) FROM parked_messages WHERE message_id = $1 AND error_code = $2`,
				x.ID, CodeChatNotProvisioned.Name); n != 1 {
				t.Fatalf("message %s: %d parked rows, want 1 waiting", x.ID, n)
			}
		}
		if got := e.Logs.Find("retry-not-provisioned", map[string]any{"LeadId": early.String()}); len(got) == 0 {
			t.Fatalf("no retry-not-provisioned log line for the lead")
		}

		// The provisioning consumer catches up: both snapshots are retried,
		// in any order; the newer one wins.
		chatID := e.provision(early)
		kafkatest.Eventually(t, servicetest.Wait, func() bool { return e.outcome(w1.ID) != "" && e.outcome(w2.ID) != "" },
			"the waiting messages were never applied")
		if o := e.outcome(w2.ID); o != string(Synced) {
			t.Fatalf("v2 outcome %q, want synced", o)
		}
		checkActive(t, e.DB, chatID, member{a, RoleExecutor}, member{b, RoleInvestorPrimary})
		if s := e.chat(chatID); s.LeadMemberVersion.Int64 != 2 {
			t.Fatalf("lead_member_version %v, want 2", s.LeadMemberVersion)
		}
		if n := e.Count(`SELECT count(*) FROM parked_messages WHERE message_id IN ($1, $2)`, w1.ID, w2.ID); n != 0 {
			t.Fatalf("%d parked rows left", n)
		}
		// The partition's offset moved past all three.
		e.awaitCommitted(tps...)
	})

	t.Run("dead-lettered after the first attempt and 10 retries when it never appears", func(t *testing.T) {
		never, a := uuid.New(), uuid.New()
		x := newEv(never, 1, member{a, RoleExecutor})
		tps := e.produce(x)
		dl := e.AwaitDLQ(1)[0]
		e.CheckDeadLetter(t, dl, x.message(), tps[0], CodeChatNotProvisioned.Name, 11)
		if got := e.outcome(x.ID); got != "" {
			t.Fatalf("dead-lettered message has a mark (%q)", got)
		}
		if n := e.Count(`SELECT count(*) FROM parked_messages WHERE message_id = $1`, x.ID); n != 0 {
			t.Fatalf("%d parked rows left after the DLQ", n)
		}
		if n := e.Run.Counter("messenger_lead_participants_dlq_total", map[string]string{"code": CodeChatNotProvisioned.Name}); n != 1 {
			t.Fatalf("messenger_lead_participants_dlq_total = %v, want 1", n)
		}
	})
}

// AC11: empty or broken ActiveParticipants (or a delta missing, null or
// with an entry without UserId) → MSG_LEAD_PARTICIPANTS_INVALID in the DLQ,
// at the first attempt, with the original message and headers.
func TestAC11_InvalidActiveParticipantsGoToDLQ(t *testing.T) {
	t.Parallel()
	e := newEnv(t, consumertest.Options{})
	lead, a := uuid.New(), uuid.New()
	chatID := e.provision(lead)

	valid := newEv(lead, 5, member{a, RoleExecutor})
	broken := map[string]func(p map[string]any){
		"empty":                 func(p map[string]any) { p["ActiveParticipants"] = []any{} },
		"missing":               func(p map[string]any) { delete(p, "ActiveParticipants") },
		"null":                  func(p map[string]any) { p["ActiveParticipants"] = nil },
		"not a list":            func(p map[string]any) { p["ActiveParticipants"] = "everyone" },
		"member without UserId": func(p map[string]any) { p["ActiveParticipants"] = []any{map[string]any{"Role": "Executor"}} },
		"UserId not a UUID": func(p map[string]any) {
			p["ActiveParticipants"] = []any{map[string]any{"UserId": "u-1", "Role": "Executor"}}
		},
		"member without Role": func(p map[string]any) { p["ActiveParticipants"] = []any{map[string]any{"UserId": a}} },
		"one user, two roles": func(p map[string]any) {
			p["ActiveParticipants"] = []any{map[string]any{"UserId": a, "Role": "Executor"}, map[string]any{"UserId": a, "Role": "Lawyer"}}
		},
		"Participants missing": func(p map[string]any) { delete(p, "Participants") },
		"Participants null":    func(p map[string]any) { p["Participants"] = nil },
		"delta entry without UserId": func(p map[string]any) {
			p["Participants"] = []any{map[string]any{"ChangeType": "Added", "Role": "Lawyer"}}
		},
		"Version 0":             func(p map[string]any) { p["Version"] = 0 },
		"LeadId missing":        func(p map[string]any) { delete(p, "LeadId") },
		"Payload not an object": nil,
	}
	type sent struct {
		name string
		msg  kafkatest.Message
	}
	var msgs []sent
	for name, mutate := range broken {
		env := newEv(lead, 5, member{a, RoleExecutor}).envelope()
		if mutate == nil {
			env.Payload = []any{1, 2}
		} else {
			mutate(env.Payload.(map[string]any))
		}
		msgs = append(msgs, sent{name, env.Message(lead, -1,
			map[string]string{"x-test-case": name, "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})})
	}
	var raw []kafkatest.Message
	for _, s := range msgs {
		raw = append(raw, s.msg)
	}
	tps := e.Produce(raw...)
	// A valid snapshot behind them on the same partition is still applied.
	tps = append(tps, e.produce(valid)...)
	e.awaitOutcome(valid.ID, Synced)
	e.awaitCommitted(tps...)

	dls := e.AwaitDLQ(len(msgs))
	byCase := map[string]*kafka.Message{}
	for _, dl := range dls {
		byCase[kafkatest.Header(dl, "x-test-case")] = dl
	}
	for i, s := range msgs {
		dl := byCase[s.name]
		if dl == nil {
			t.Errorf("%s: not in the DLQ", s.name)
			continue
		}
		e.CheckDeadLetter(t, dl, s.msg, tps[i], CodeInvalid.Name, 1)
		if kafkatest.Header(dl, "traceparent") == "" {
			t.Errorf("%s: the original headers are not kept", s.name)
		}
	}
	if n := e.Count(`SELECT count(*) FROM processed_messages`); n != 1 {
		t.Fatalf("%d idempotency marks, want only the valid message's", n)
	}
	checkActive(t, e.DB, chatID, member{a, RoleExecutor})
	if n := e.Run.Counter("messenger_lead_participants_dlq_total", map[string]string{"code": CodeInvalid.Name}); n != float64(len(msgs)) {
		t.Fatalf("messenger_lead_participants_dlq_total = %v, want %d (the DLQ > 0 alert feeds on it)", n, len(msgs))
	}
}

// AC12: concurrent edit of the same chat → the newer version wins, the
// loser re-reads (3 attempts); membership is never overwritten by an older
// one. The concurrent writer runs in the test hook, between the consumer's
// read of the chat and its first write.
func TestAC12_ConcurrentEditNewerVersionWins(t *testing.T) {
	t.Parallel()
	e := newEnv(t, consumertest.Options{})
	other := &handler{m: newMetrics(nil)} // another consumer instance

	// concurrently runs x to completion in its own transaction the first
	// time the consumer is about to write chatID.
	concurrently := func(t *testing.T, chatID uuid.UUID, x ev) *atomic.Bool {
		var fired atomic.Bool
		onBeforeWrite(t, chatID, func(ctx context.Context) {
			if fired.Swap(true) {
				return
			}
			if out, err := applyDirect(context.Background(), e.Client, other, x); err != nil || out != Synced {
				t.Errorf("concurrent writer: %v, %v", out, err)
			}
		})
		return &fired
	}
	retries := func() float64 {
		return e.Run.Counter("pin_consumer_retries_total", map[string]string{"class": "retry-now", "code": CodeConcurrentUpdate.Name})
	}

	t.Run("a newer snapshot committed concurrently wins; the loser re-reads and is stale", func(t *testing.T) {
		lead, a, b, c := uuid.New(), uuid.New(), uuid.New(), uuid.New()
		chatID := e.provision(lead)
		v1 := newEv(lead, 1, member{a, RoleExecutor})
		e.produce(v1)
		e.awaitOutcome(v1.ID, Synced)

		v2 := newEv(lead, 2, member{a, RoleExecutor}, member{b, RoleCoAgent})
		v3 := newEv(lead, 3, member{a, RoleExecutor}, member{c, RoleLawyer})
		r0 := retries()
		fired := concurrently(t, chatID, v3)
		tps := e.produce(v2)
		e.awaitOutcome(v2.ID, SkippedStale)
		e.awaitCommitted(tps...)
		if !fired.Load() {
			t.Fatal("the concurrent writer never ran")
		}
		checkActive(t, e.DB, chatID, member{a, RoleExecutor}, member{c, RoleLawyer})
		if s := e.chat(chatID); s.LeadMemberVersion.Int64 != 3 || s.RowVersion != 2 {
			t.Fatalf("chat %+v, want lead_member_version 3 and row_version 2 (v1, v3)", s)
		}
		for _, x := range e.events(chatID) {
			if x.UserID == b {
				t.Fatalf("fact %+v of the older snapshot", x)
			}
		}
		if r := retries() - r0; r != 1 {
			t.Fatalf("%v retry-now of MSG_CONCURRENT_UPDATE, want 1 (one re-read)", r)
		}
	})

	t.Run("an older snapshot committed concurrently is overwritten after the re-read", func(t *testing.T) {
		lead, a, b, c := uuid.New(), uuid.New(), uuid.New(), uuid.New()
		chatID := e.provision(lead)
		v1 := newEv(lead, 1, member{a, RoleExecutor})
		e.produce(v1)
		e.awaitOutcome(v1.ID, Synced)

		v2 := newEv(lead, 2, member{a, RoleExecutor}, member{b, RoleCoAgent})
		v3 := newEv(lead, 3, member{a, RoleExecutor}, member{c, RoleLawyer})
		fired := concurrently(t, chatID, v2)
		tps := e.produce(v3)
		e.awaitOutcome(v3.ID, Synced)
		e.awaitCommitted(tps...)
		if !fired.Load() {
			t.Fatal("the concurrent writer never ran")
		}
		checkActive(t, e.DB, chatID, member{a, RoleExecutor}, member{c, RoleLawyer})
		if s := e.chat(chatID); s.LeadMemberVersion.Int64 != 3 || s.RowVersion != 3 {
			t.Fatalf("chat %+v, want lead_member_version 3 and row_version 3", s)
		}
		// v3 was computed against v2's membership after the re-read: b left.
		types := map[uuid.UUID]string{}
		for _, x := range e.eventsOfMessage(chatID, v3.ID) {
			types[x.UserID] = x.Type
		}
		if types[b] != EventParticipantLeft || types[c] != EventParticipantJoined || len(types) != 2 {
			t.Fatalf("facts of v3 by user %v, want b Left and c Joined", types)
		}
	})

	t.Run("a writer that always loses is dead-lettered after 3 re-reads", func(t *testing.T) {
		lead, a, b := uuid.New(), uuid.New(), uuid.New()
		chatID := e.provision(lead)
		v1 := newEv(lead, 1, member{a, RoleExecutor})
		e.produce(v1)
		e.awaitOutcome(v1.ID, Synced)
		before := e.chat(chatID)

		var attempts atomic.Int32
		onBeforeWrite(t, chatID, func(ctx context.Context) {
			attempts.Add(1)
			if _, err := e.DB.Exec(`UPDATE chats SET row_version = row_version + 1 WHERE id = $1`, chatID); err != nil {
				t.Errorf("concurrent writer: %v", err)
			}
		})
		v2 := newEv(lead, 2, member{a, RoleExecutor}, member{b, RoleLawyer})
		tps := e.produce(v2)
		dl := e.AwaitDLQ(1)[0]
		e.CheckDeadLetter(t, dl, v2.message(), tps[0], CodeConcurrentUpdate.Name, 4)
		e.awaitCommitted(tps...)
		if n := attempts.Load(); n != 4 {
			t.Fatalf("%d attempts, want 4 (the first and 3 re-reads)", n)
		}
		checkActive(t, e.DB, chatID, member{a, RoleExecutor})
		if s := e.chat(chatID); s.LeadMemberVersion != before.LeadMemberVersion {
			t.Fatalf("lead_member_version %v, want unchanged %v", s.LeadMemberVersion, before.LeadMemberVersion)
		}
		if got := e.outcome(v2.ID); got != "" {
			t.Fatalf("dead-lettered message has a mark (%q)", got)
		}
	})
}

// AC13: unknown ChangeType / Role → warning; membership converges; unknown
// role stored as is.
func TestAC13_UnknownChangeTypeAndRoleConverge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, consumertest.Options{})
	lead, a, notary, c := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	chatID := e.provision(lead)

	v1 := newEv(lead, 1, member{a, RoleExecutor})
	v2 := newEv(lead, 2, member{a, RoleExecutor}, member{notary, "Notary"}).
		with(change{User: notary, Type: "Teleported", Role: "Notary"})
	// Only an unknown ChangeType in the delta, yet c joins and a is re-roled.
	v3 := newEv(lead, 3, member{a, "coagent"}, member{notary, "Notary"}, member{c, "LAWYER"}).
		with(change{User: a, Type: "Frobnicated", Role: "CoAgent"})
	tps := e.produce(v1, v2, v3)
	e.awaitOutcome(v3.ID, Synced)
	e.awaitCommitted(tps...)

	checkActive(t, e.DB, chatID, member{a, RoleCoAgent}, member{notary, "Notary"}, member{c, RoleLawyer})
	evs := e.eventsOfMessage(chatID, v2.ID)
	if len(evs) != 1 || evs[0].Type != EventParticipantJoined || evs[0].Role != "Notary" {
		t.Fatalf("facts of v2 %+v, want the notary Joined with its role as it came", evs)
	}
	if got := e.logged("unknown role", map[string]any{"level": "warn", "LeadId": lead.String(), "UserId": notary.String(), "Role": "Notary"}); len(got) == 0 {
		t.Fatalf("no warning for the unknown role")
	}
	for _, ct := range []string{"Teleported", "Frobnicated"} {
		if got := e.logged("unknown ChangeType", map[string]any{"level": "warn", "LeadId": lead.String(), "ChangeType": ct}); len(got) == 0 {
			t.Fatalf("no warning for the unknown ChangeType %s", ct)
		}
	}
	types := map[uuid.UUID]string{}
	for _, x := range e.eventsOfMessage(chatID, v3.ID) {
		types[x.UserID] = x.Type
	}
	if len(types) != 2 || types[a] != EventParticipantRoleChanged || types[c] != EventParticipantJoined {
		t.Fatalf("facts of v3 by user %v", types)
	}
}

// An unknown Role is stored as it came as long as the column holds it:
// varchar(32) counts characters (code points), not bytes. A role of 32
// Cyrillic characters (64 bytes) is stored byte for byte; one of 33 is
// MSG_LEAD_PARTICIPANTS_INVALID in the DLQ, at the first attempt.
func TestAnUnknownRoleFitsTheColumnInCharactersNotBytes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, consumertest.Options{})
	lead, a, observer := uuid.New(), uuid.New(), uuid.New()
	chatID := e.provision(lead)
	role32 := "Внешнийнаблюдатель" + strings.Repeat("ё", 14) // 32 characters, 64 bytes
	role33 := role32 + "ь"
	if n := utf8.RuneCountInString(role32); n != 32 || len(role32) != 64 {
		t.Fatalf("role32 has %d characters, %d bytes", n, len(role32))
	}

	v1 := newEv(lead, 1, member{a, RoleExecutor}, member{observer, role32})
	v2 := newEv(lead, 2, member{a, RoleExecutor}, member{observer, role33})
	tps := e.produce(v1, v2)
	e.awaitOutcome(v1.ID, Synced)
	dl := e.AwaitDLQ(1)[0]
	e.CheckDeadLetter(t, dl, v2.message(), tps[1], CodeInvalid.Name, 1)
	if r := kafkatest.Header(dl, "x-dlq-reason"); !strings.Contains(r, "Role is longer than 32 characters") {
		t.Errorf("x-dlq-reason %q, want it to name the Role longer than 32 characters", r)
	}
	e.awaitCommitted(tps...)

	checkActive(t, e.DB, chatID, member{a, RoleExecutor}, member{observer, role32})
	joined := false
	for _, x := range e.eventsOfMessage(chatID, v1.ID) {
		joined = joined || (x.UserID == observer && x.Type == EventParticipantJoined && x.Role == role32)
	}
	if !joined {
		t.Fatalf("facts of v1 %+v, want the observer Joined with its role as it came", e.eventsOfMessage(chatID, v1.ID))
	}
	if got := e.logged("unknown role", map[string]any{"level": "warn", "LeadId": lead.String(), "UserId": observer.String(), "Role": role32}); len(got) == 0 {
		t.Fatalf("no warning for the unknown role")
	}
	if got := e.outcome(v2.ID); got != "" {
		t.Fatalf("dead-lettered message has a mark (%q)", got)
	}
}
