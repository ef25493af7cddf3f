package consumer

import (
	"bytes"
	"reflect"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// cgmdMagic opens librdkafka's serialized consumer group metadata
// (rd_kafka_consumer_group_metadata_write, librdkafka 2.x): the magic,
// the generation id (int32, host order), then the group id and the
// member id, each NUL-terminated, then the group instance id.
var cgmdMagic = []byte("CGMDv2:")

// groupMember reports whether librdkafka holds a member id for the
// group. Under the classic protocol the id comes with the answer to the
// member's first JoinGroup and is cleared when librdkafka sends its
// LeaveGroup (its unsubscribe done, an assignment it held given back),
// or when the member times out or is fenced: without one, the member has
// left or never joined, as far as librdkafka can tell (see leave for
// what the coordinator may still hold). Under KIP-848 the id is the
// client's own from the start: it says nothing there. known is false
// when it cannot tell.
//
// librdkafka exports the id only inside the consumer group metadata it
// serializes for a transactional producer; confluent-kafka-go keeps those
// bytes in an unexported field, read here by reflection. A layout that
// does not match (another librdkafka) reads as unknown, and leave then
// falls back on what the rebalance callbacks told it.
// TestGroupMemberFollowsTheClassicJoinAndLeave pins the layout.
func groupMember(c *kafka.Consumer) (member, known bool) {
	md, err := c.GetConsumerGroupMetadata()
	if err != nil || md == nil {
		return false, false
	}
	id, ok := cgmdMemberID(md)
	return id != "", ok
}

// cgmdMemberID reads the member id out of md's serialized form.
func cgmdMemberID(md *kafka.ConsumerGroupMetadata) (string, bool) {
	f := reflect.ValueOf(md).Elem().FieldByName("serialized")
	if !f.IsValid() || f.Kind() != reflect.Slice || f.Type().Elem().Kind() != reflect.Uint8 {
		return "", false
	}
	b, ok := bytes.CutPrefix(f.Bytes(), cgmdMagic)
	if !ok || len(b) < 4 {
		return "", false
	}
	b = b[4:]                          // the generation id
	_, b, ok = bytes.Cut(b, []byte{0}) // the group id
	if !ok {
		return "", false
	}
	id, _, ok := bytes.Cut(b, []byte{0})
	if !ok {
		return "", false
	}
	return string(id), true
}
