package rewards

import (
	"context"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
)

// describe gives the spec's log fields (MessageId, BondId, ReferredUserId,
// payload Version, the row's ReplicaVersion and Status) of a bond event
// whose handler did not run: its payload's, and its bond's row.
func describe(ctx context.Context, client *ent.Client, m *consumer.Message) func(*zerolog.Event) {
	lf := &bondLog{}
	var bond, referred *string
	switch m.EventType {
	case EventTypeBondCreated:
		w, err := consumer.DecodePayload[createdWire](m)
		if err != nil {
			return nil
		}
		bond, referred = w.BondID, w.ReferredUserID
		if w.Version != nil {
			lf.version = *w.Version
		}
	case EventTypeBondClosed:
		w, err := consumer.DecodePayload[closedWire](m)
		if err != nil {
			return nil
		}
		bond, referred = w.BondID, w.ReferredUserID
		if w.Version != nil {
			lf.version = *w.Version
		}
		if w.Status != nil {
			st, _ := ParseStatus(*w.Status)
			lf.eventStatus = string(st)
		}
	default:
		return nil
	}
	if bond != nil {
		lf.bondID, _ = uuid.Parse(*bond)
	}
	if referred != nil {
		lf.referredUserID, _ = uuid.Parse(*referred)
	}
	if lf.bondID != uuid.Nil {
		if row, err := client.ReferralBondReplica.Get(ctx, lf.bondID); err == nil {
			lf.setRow(row)
		}
	}
	return lf.fields
}
