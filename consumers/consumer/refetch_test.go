package consumer_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pin-platform/pin/consumers/consumer/consumertest"
)

// A message larger than what the partition's byte budget has left (here
// larger than CONSUMER_QUEUE_BYTES itself) behind a message still being
// handled: the partition pauses and stays paused until the message it
// waits for can go in, rather than resuming at once, seeking back and
// fetching the large record again and again while nothing changed.
func TestALargeRecordBehindABusyOneIsNotFetchedAgainAndAgain(t *testing.T) {
	t.Parallel()
	e := kfakeEnv(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "8388608"}))
	fc := e.cluster.Kfake()
	leadID := e.lead()
	id, first := envelope(leadID, "hold")
	h := holdMessage(t, id)
	e.produce(0, first)
	v, _ := json.Marshal(map[string]any{
		"MessageId": uuid.New(), "EventType": probeType, "ContractVersion": 1,
		"CreatedAt": time.Now().UTC().Format(time.RFC3339Nano), "AggregateId": leadID, "AggregateType": "Lead",
		"Payload": map[string]any{"LeadId": leadID, "Pad": strings.Repeat("p", 5<<19)}, // 2.5 MiB
	})
	e.produce(0, v)
	var resumes atomic.Int64
	log := zerolog.New(resumeCounter{&resumes}).Level(zerolog.DebugLevel)
	e.start(probeService(long...), consumertest.Options{Logger: &log})
	h.awaitStarted(t)
	fetches := fc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Observe: true, Count: -1})
	time.Sleep(5 * time.Second)
	fetches.Remove()
	n := resumes.Load()
	t.Logf("the partition was resumed %d times, %d fetch requests, in 5 s while one small message is in hand", n, fetches.Hits())
	if n > 1 {
		t.Fatalf("resumed %d times in 5 s: the refused 2.5 MiB record is sought back to and fetched again each time, while nothing it waits for has changed", n)
	}
	h.Release()
	e.waitCommitted(2)
}

type resumeCounter struct{ n *atomic.Int64 }

func (c resumeCounter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("partition resumed")) {
		c.n.Add(1)
	}
	return len(p), nil
}
