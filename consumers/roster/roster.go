// Package roster is the one list of the consumers: each service's
// constructor, partitions and default HTTP port. Its name, topic, group,
// DLQ topic and invalid code are the ones its own package's New sets on
// its consumer.Service, read from there. Everything else that needs the
// set of services — the binaries, pinctl's dev environment, benchmark and
// chaos run, the demo, the tests, the deploy checks, the README's tables —
// takes it from here, or is checked against it. Adding a consumer is a
// package, one entry here, its role migration and the lists the tests
// name (README, "Adding a consumer").
package roster

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/crm"
	"github.com/pin-platform/pin/consumers/messenger"
	"github.com/pin-platform/pin/consumers/rewards"
)

// Service is one consumer of the roster.
type Service struct {
	// New builds the consumer.Service and registers the service's own
	// metrics on reg.
	New        func(reg prometheus.Registerer) consumer.Service
	Partitions int // the topic's, and its DLQ's
	Port       int // the default HTTP_ADDR port

	svc *consumer.Service // what New builds, once, on a registry of its own
}

// The three consumers.
var (
	Messenger = declare(Service{New: messenger.New, Partitions: 3, Port: 9090})
	Rewards   = declare(Service{New: rewards.New, Partitions: 6, Port: 9091})
	CRM       = declare(Service{New: crm.New, Partitions: 6, Port: 9092})
)

// All is every consumer, in a fixed order.
var All = []Service{Messenger, Rewards, CRM}

func declare(s Service) Service {
	svc := s.New(prometheus.NewRegistry())
	s.svc = &svc
	return s
}

// Name is the metric label, log field, and the root of the binary's and
// the roles' names.
func (s Service) Name() string { return s.svc.Name }

// Topic is the service's source topic.
func (s Service) Topic() string { return s.svc.Topic }

// Group is the service's consumer group.
func (s Service) Group() string { return s.svc.Group }

// DLQTopic is the service's dead-letter topic.
func (s Service) DLQTopic() string { return s.svc.DLQTopic }

// InvalidCode is the code of a readable envelope with a bad payload.
func (s Service) InvalidCode() string { return s.svc.InvalidCode.Name }

// Named returns the service called name.
func Named(name string) (Service, bool) {
	for _, s := range All {
		if s.Name() == name {
			return s, true
		}
	}
	return Service{}, false
}

// Binary is the name of the service's command ("rewards-consumers").
func (s Service) Binary() string { return s.Name() + "-consumers" }

// Addr is the service's default HTTP_ADDR (":9091").
func (s Service) Addr() string { return fmt.Sprintf(":%d", s.Port) }
