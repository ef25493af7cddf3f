package observability

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/crm"
	"github.com/pin-platform/pin/consumers/demo"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/consumers/messenger"
	"github.com/pin-platform/pin/consumers/rewards"
	"github.com/pin-platform/pin/migrate/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// service is one consumer as these tests see it.
type service struct {
	name  string
	build func(prometheus.Registerer) consumer.Service
	topic demo.Topic
	dlq   string // the spec's DLQ counter
}

func services() []service {
	topic := func(name string) demo.Topic {
		for _, t := range demo.Topics {
			if t.Service == name {
				return t
			}
		}
		panic(name)
	}
	return []service{
		{"messenger", messenger.New, topic("messenger"), "messenger_lead_participants_dlq_total"},
		{"rewards", rewards.New, topic("rewards"), rewards.MetricDLQ},
		{"crm", crm.New, topic("crm"), crm.MetricDLQ},
	}
}

// TestEveryCodeOfTheSpecIsExportedAtZeroFromTheStart reads each service's
// /metrics as soon as it answers, before any message: the DLQ counters
// list every code of the spec (and EVENT_ENVELOPE_INVALID) at 0, so that
// "DLQ > 0" (increase) sees the first dead letter after a restart.
func TestEveryCodeOfTheSpecIsExportedAtZeroFromTheStart(t *testing.T) {
	for _, s := range services() {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			cl := kafkatest.NewCluster(t, map[string]int{s.topic.Name: s.topic.Partitions, s.topic.DLQ: s.topic.Partitions})
			run := consumertest.Start(t, cl.Bootstrap, pgtest.NewDB(t), s.build, consumertest.Options{HTTP: true})
			var body string
			kafkatest.Eventually(t, 30*time.Second, func() bool {
				var err error
				body, err = scrape(run.Runtime.HTTPAddr())
				return err == nil
			}, "/metrics to answer")
			svc := s.build(prometheus.NewRegistry())
			codes := []string{consumer.EnvelopeInvalid.Name, consumer.ProcessingFailed.Name}
			for _, c := range svc.Codes {
				codes = append(codes, c.Name)
			}
			for _, code := range codes {
				for _, series := range []string{
					fmt.Sprintf(`%s{code="%s"} 0`, s.dlq, code),
					fmt.Sprintf(`pin_consumer_dlq_total{code="%s",service="%s"} 0`, code, s.name),
				} {
					if !hasLine(body, series) {
						t.Errorf("/metrics lacks %s", series)
					}
				}
			}
			for _, r := range svc.Routes() {
				series := fmt.Sprintf(`pin_consumer_messages_total{event_type="%s",outcome="dead-lettered",service="%s"} 0`, r.EventType, s.name)
				if !hasLine(body, series) {
					t.Errorf("/metrics lacks %s", series)
				}
			}
		})
	}
}

func scrape(addr string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
	}
	return b.String(), sc.Err()
}

func hasLine(body, line string) bool {
	for _, l := range strings.Split(body, "\n") {
		if l == line {
			return true
		}
	}
	return false
}
