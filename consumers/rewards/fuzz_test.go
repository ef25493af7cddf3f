package rewards

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/servicetest"
)

// The fuzz targets of this package; their seed corpora are under
// testdata/fuzz/<name> (plain `go test` runs them), `make fuzz` fuzzes each.

// FuzzDecodeRewards: decodeCreated (closed false) and decodeClosed (closed
// true), the handlers' decoding, do not panic on any Payload; a refusal
// carries REWARDS_BOND_EVENT_INVALID and no other code (or, for a value
// whose envelope cannot be read, EVENT_ENVELOPE_INVALID); what they accept
// is storable — BondId, ReferredUserId (and ReferrerUserId) non-nil,
// Version ≥ 1; a bond-created's BoundAt set and not beyond MAX_CLOCK_SKEW;
// a bond-closed's Status non-blank, at most 32 characters of valid UTF-8
// without NUL, never Active, a known one in the spec's spelling — and,
// written back as a payload, decodes to the same event.
func FuzzDecodeRewards(f *testing.F) {
	svc := New(prometheus.NewRegistry())
	f.Fuzz(func(t *testing.T, closed bool, payload []byte) {
		eventType := EventTypeBondCreated
		if closed {
			eventType = EventTypeBondClosed
		}
		m, err := servicetest.PayloadMessage(svc, eventType, "ReferralBond", payload)
		if err != nil {
			servicetest.RequireOneCode(t, err, consumer.EnvelopeInvalid)
			return
		}
		if closed {
			p, err := decodeClosed(m)
			if err != nil {
				servicetest.RequireOneCode(t, err, CodeInvalid)
				return
			}
			checkClosed(t, p)
			again := reDecode(t, svc, eventType, closedWire{
				BondID: ptr(p.BondID.String()), ReferredUserID: ptr(p.ReferredUserID.String()),
				Status: ptr(string(p.Status)), ReplacedByBondID: idString(p.ReplacedByBondID), Version: &p.Version,
			}, decodeClosed)
			if again.BondID != p.BondID || again.ReferredUserID != p.ReferredUserID || again.Status != p.Status ||
				again.StatusKnown != p.StatusKnown || !equalIDs(again.ReplacedByBondID, p.ReplacedByBondID) || again.Version != p.Version {
				t.Fatalf("written back, the bond-closed decodes to another one:\nfirst %+v\nagain %+v", p, again)
			}
			return
		}
		p, err := decodeCreated(m)
		if err != nil {
			servicetest.RequireOneCode(t, err, CodeInvalid)
			return
		}
		checkCreated(t, p)
		again := reDecode(t, svc, eventType, createdWire{
			BondID: ptr(p.BondID.String()), ReferredUserID: ptr(p.ReferredUserID.String()), ReferrerUserID: ptr(p.ReferrerUserID.String()),
			ReferrerCompanyID: idString(p.ReferrerCompanyID), BoundAt: &p.BoundAt, Version: &p.Version,
		}, decodeCreated)
		if again.BondID != p.BondID || again.ReferredUserID != p.ReferredUserID || again.ReferrerUserID != p.ReferrerUserID ||
			!equalIDs(again.ReferrerCompanyID, p.ReferrerCompanyID) || !again.BoundAt.Equal(p.BoundAt) || again.Version != p.Version {
			t.Fatalf("written back, the bond-created decodes to another one:\nfirst %+v\nagain %+v", p, again)
		}
	})
}

func checkCreated(t *testing.T, p BondCreated) {
	t.Helper()
	if p.BondID == uuid.Nil || p.ReferredUserID == uuid.Nil || p.ReferrerUserID == uuid.Nil || p.Version < 1 {
		t.Fatalf("accepted bond-created %+v: a nil id or Version < 1", p)
	}
	if p.BoundAt.IsZero() || p.BoundAt.After(time.Now().Add(servicetest.MaxSkew)) {
		t.Fatalf("accepted BoundAt %s: zero or beyond MAX_CLOCK_SKEW", p.BoundAt)
	}
	if _, err := p.BoundAt.MarshalJSON(); err != nil {
		t.Fatalf("accepted BoundAt %s out of range: %v", p.BoundAt, err)
	}
	if r := newRow(p, time.Now()); !Status(r.Status).Active() || r.BoundAt.IsZero() {
		t.Fatalf("the row of %+v is %+v", p, r)
	}
}

func checkClosed(t *testing.T, p BondClosed) {
	t.Helper()
	if p.BondID == uuid.Nil || p.ReferredUserID == uuid.Nil || p.Version < 1 {
		t.Fatalf("accepted bond-closed %+v: a nil id or Version < 1", p)
	}
	s := string(p.Status)
	if strings.TrimSpace(s) == "" || utf8.RuneCountInString(s) > maxStatusLen || !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		t.Fatalf("accepted Status %q: blank, longer than %d characters, not UTF-8 or with a NUL", s, maxStatusLen)
	}
	if p.Status.Active() {
		t.Fatalf("accepted Status %q, which is Active", s)
	}
	if st, known := ParseStatus(s); known != p.StatusKnown || (known && st != p.Status) {
		t.Fatalf("Status %q known %v: not in the spec's spelling or wrongly reported", s, p.StatusKnown)
	}
}

// reDecode writes w as the payload of a new message and decodes it.
func reDecode[W, P any](t *testing.T, svc consumer.Service, eventType string, w W, decode func(*consumer.Message) (P, error)) P {
	t.Helper()
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatalf("encode %+v: %v", w, err)
	}
	m, err := servicetest.PayloadMessage(svc, eventType, "ReferralBond", b)
	if err != nil {
		t.Fatalf("written back, the payload is not a readable envelope: %v\n%s", err, b)
	}
	p, err := decode(m)
	if err != nil {
		t.Fatalf("written back, the payload is refused: %v\n%s", err, b)
	}
	return p
}

func ptr[T any](v T) *T { return &v }

func idString(id *uuid.UUID) *string {
	if id == nil {
		return nil
	}
	return ptr(id.String())
}

// FuzzDecide: Decide does not panic and keeps the documented invariants
// for any row (or none) and event: no row — a bond-created inserts, a
// bond-closed is an orphan; a Version not above replica_version is always
// skipped as stale (BND-1); nothing but an insert makes a bond Active,
// so a terminal row (Replaced, Revoked, in any case) never changes and a
// row that is not Active never becomes Active (BND-4); an update only
// on an Active row, a close only of a row that is not terminal and has
// the event's ReferredUserId. The event's Status is one decodeClosed
// accepts (a closing one).
func FuzzDecide(f *testing.F) {
	users := []uuid.UUID{uuid.MustParse(referred), uuid.MustParse(referrer), uuid.Nil}
	f.Fuzz(func(t *testing.T, hasRow bool, rowStatus string, rowVersion int64, rowUser uint8,
		closed bool, evStatus string, evVersion int64, evUser uint8) {
		ev := Event{Type: BondCreatedEvent, Version: evVersion, ReferredUserID: users[int(evUser)%len(users)]}
		var closing Status
		if closed {
			ev.Type = BondClosedEvent
			p, err := closedWire{BondID: ptr(bond1), ReferredUserID: ptr(referred), Status: &evStatus, Version: ptr(int64(1))}.validate()
			if err != nil {
				closing = StatusRevoked // not a Status a bond-closed can carry: take a valid one
			} else {
				closing = p.Status
			}
		}
		var row *Row
		if hasRow {
			row = &Row{Status: Status(rowStatus), ReplicaVersion: rowVersion, ReferredUserID: users[int(rowUser)%len(users)]}
		}
		a := Decide(row, ev)
		if _, named := actionNames[a]; !named {
			t.Fatalf("Decide(%+v, %+v) = %s, not an action", row, ev, a)
		}
		if row == nil {
			want := ActionInsert
			if closed {
				want = ActionOrphan
			}
			if a != want {
				t.Fatalf("no row, %s: %s, want %s", ev.Type, a, want)
			}
			return
		}
		if closed && row.Status.Terminal() {
			// BND-4: the bond's one closed again, whatever its Version.
			if a != ActionSkipAlreadyClosed {
				t.Fatalf("closed on a terminal row %+v: %s, want %s", *row, a, ActionSkipAlreadyClosed)
			}
		} else if ev.Version <= row.ReplicaVersion && a != ActionSkipStale {
			t.Fatalf("Version %d ≤ replica_version %d: %s, want %s", ev.Version, row.ReplicaVersion, a, ActionSkipStale)
		}
		after := row.Status // the row's status once the action is applied
		switch a {
		case ActionInsert, ActionOrphan:
			t.Fatalf("row %+v: %s is for no row", *row, a)
		case ActionUpdate:
			if !row.Status.Active() || ev.Type != BondCreatedEvent {
				t.Fatalf("%s of a %s on a row in status %q", a, ev.Type, row.Status)
			}
		case ActionClose:
			if row.Status.Terminal() || ev.Type != BondClosedEvent || ev.ReferredUserID != row.ReferredUserID {
				t.Fatalf("%s by %+v of row %+v", a, ev, *row)
			}
			after = closing
		}
		if a == ActionUpdate || a == ActionClose {
			if ev.Version <= row.ReplicaVersion {
				t.Fatalf("%s moves replica_version back or keeps it: %d → %d", a, row.ReplicaVersion, ev.Version)
			}
		}
		if row.Status.Terminal() && after != row.Status {
			t.Fatalf("terminal row %+v changed to %q by %+v (%s)", *row, after, ev, a)
		}
		if !row.Status.Active() && after.Active() {
			t.Fatalf("row %+v not Active became Active by %+v (%s)", *row, ev, a)
		}
	})
}
