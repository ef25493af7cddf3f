package consumer_test

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/kafkatest"
)

// A backlog of large records behind a message that waits: its partition
// holds at most CONSUMER_QUEUE_BYTES of them, not CONSUMER_QUEUE_SIZE
// (the 40 × 900 KiB here would be 35 MiB), and the heap stays near what it was;
// once the message goes on, every record is applied. Not parallel: the
// heap is measured while no other test of the package runs. On kfake: the
// mock cluster keeps only the last few MiB of a partition.
func TestABacklogOfLargeRecordsIsBoundedByBytesNotCount(t *testing.T) {
	e := kfakeEnv(t)
	leadID := e.lead()
	id, first := envelope(leadID, "hold")
	h := holdMessage(t, id)
	e.produce(0, first)
	const n, size = 40, 900 << 10
	pad := strings.Repeat("p", size)
	for range n {
		v, _ := json.Marshal(map[string]any{
			"MessageId": uuid.New(), "EventType": probeType, "ContractVersion": 1,
			"CreatedAt": time.Now().UTC().Format(time.RFC3339Nano), "AggregateId": leadID, "AggregateType": "Lead",
			"Payload": map[string]any{"LeadId": leadID, "Pad": pad},
		})
		e.produce(0, v)
	}
	before := heap()

	r := e.start(probeService(long...), consumertest.Options{})
	h.awaitStarted(t)
	kafkatest.Eventually(t, 30*time.Second, func() bool {
		return r.Counter("pin_consumer_paused_partitions", nil) == 1
	}, "the partition to pause on its byte budget")
	held := r.Counter("pin_consumer_held_bytes", nil)
	grown := heap() - before
	t.Logf("held %.1f MiB of messages; heap grew by %.1f MiB", held/(1<<20), float64(grown)/(1<<20))
	if limit := float64(consumer.DefaultQueueBytes + size + 1024); held > limit {
		t.Fatalf("pin_consumer_held_bytes = %.0f, want at most the budget plus one record (%.0f)", held, limit)
	}
	if grown > 16<<20 {
		t.Fatalf("the heap grew by %d MiB behind one waiting message, want it bounded by the byte budget", grown>>20)
	}
	h.Release()
	e.waitCommitted(n + 1)
	if got := e.events(leadID); got != n+1 {
		t.Fatalf("lead_events = %d, want %d", got, n+1)
	}
}

// heap is the live heap after a collection.
func heap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
