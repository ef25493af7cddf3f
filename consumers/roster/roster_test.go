package roster

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Each entry agrees with the consumer.Service its constructor builds, and
// no two entries share a name, a topic, a group, a DLQ or a port.
func TestEntriesAgreeWithTheirServices(t *testing.T) {
	seen := map[string]string{}
	once := func(kind, v, name string) {
		if other, dup := seen[kind+v]; dup {
			t.Errorf("%s and %s share the %s %s", other, name, kind, v)
		}
		seen[kind+v] = name
	}
	for _, s := range All {
		svc := s.New(prometheus.NewRegistry())
		if svc.Name != s.Name || svc.Topic != s.Topic || svc.Group != s.Group || svc.DLQTopic != s.DLQTopic || svc.InvalidCode.Name != s.InvalidCode {
			t.Errorf("%s: the roster says %+v, the service %s %s %s %s %s", s.Name, s, svc.Name, svc.Topic, svc.Group, svc.DLQTopic, svc.InvalidCode.Name)
		}
		if s.Partitions < 1 || s.Port < 1 {
			t.Errorf("%s: partitions %d, port %d", s.Name, s.Partitions, s.Port)
		}
		once("name", s.Name, s.Name)
		once("topic", s.Topic, s.Name)
		once("group", s.Group, s.Name)
		once("DLQ", s.DLQTopic, s.Name)
		once("port", s.Addr(), s.Name)
		if got, ok := Named(s.Name); !ok || got.Topic != s.Topic {
			t.Errorf("Named(%q) = %+v, %v", s.Name, got, ok)
		}
	}
}
