package bench

import (
	"maps"
	"testing"

	"github.com/pin-platform/pin/consumers/kafkatest"
)

// The bench's groups start from committed offsets, each partition's low
// watermark, so that librdkafka does not reset them after its backoff.
func TestCommitStartCommitsEachPartitionsFirstOffset(t *testing.T) {
	const topic, group = "bench.start", "bench-start"
	c := kafkatest.NewCluster(t, map[string]int{topic: 3})
	c.Produce(t, topic, kafkatest.Message{Partition: 0, Value: []byte("v")}, kafkatest.Message{Partition: 2, Value: []byte("w")})
	if got := c.Committed(t, group, topic); len(got) != 0 {
		t.Fatalf("a new group has committed offsets %v", got)
	}
	if err := commitStart(c.Bootstrap, group, topic, 3); err != nil {
		t.Fatal(err)
	}
	if got, want := c.Committed(t, group, topic), map[int32]int64{0: 0, 1: 0, 2: 0}; !maps.Equal(got, want) {
		t.Fatalf("committed %v, want %v", got, want)
	}
	if err := commitStart(c.Bootstrap, group, "bench.absent", 1); err == nil {
		t.Fatal("commitStart of a topic the broker does not have: no error")
	}
}
