// Package roster is the one list of the consumers: each service's name,
// topic, partitions, group, DLQ topic, default HTTP port and invalid code,
// and its constructor. The services declare their topic, group, DLQ and
// codes in their own packages (where their consumer.Service uses them);
// everything else that needs the set of services — the binaries, pinctl's
// dev environment, benchmark and chaos run, the demo, the tests, the
// deploy checks, the README's tables — takes it from here, or is checked
// against it. Adding a consumer is a package, one entry here, its role
// migration and the lists the tests name (README, "Adding a consumer").
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
	Name        string // the metric label, log field, and the root of the binary's and the roles' names
	Topic       string
	Partitions  int // the topic's, and its DLQ's
	Group       string
	DLQTopic    string
	Port        int    // the default HTTP_ADDR port
	InvalidCode string // the code of a readable envelope with a bad payload
	// New builds the consumer.Service and registers the service's own
	// metrics on reg.
	New func(reg prometheus.Registerer) consumer.Service
}

// The three consumers.
var (
	Messenger = Service{Name: "messenger", Topic: messenger.Topic, Partitions: 3, Group: messenger.Group,
		DLQTopic: messenger.DLQTopic, Port: 9090, InvalidCode: messenger.CodeInvalid.Name, New: messenger.New}
	Rewards = Service{Name: "rewards", Topic: rewards.Topic, Partitions: 6, Group: rewards.Group,
		DLQTopic: rewards.DLQTopic, Port: 9091, InvalidCode: rewards.CodeInvalid.Name, New: rewards.New}
	CRM = Service{Name: "crm", Topic: crm.Topic, Partitions: 6, Group: crm.Group,
		DLQTopic: crm.DLQTopic, Port: 9092, InvalidCode: crm.CodeEventInvalid.Name, New: crm.New}
)

// All is every consumer, in a fixed order.
var All = []Service{Messenger, Rewards, CRM}

// Named returns the service called name.
func Named(name string) (Service, bool) {
	for _, s := range All {
		if s.Name == name {
			return s, true
		}
	}
	return Service{}, false
}

// Binary is the name of the service's command ("rewards-consumers").
func (s Service) Binary() string { return s.Name + "-consumers" }

// Addr is the service's default HTTP_ADDR (":9091").
func (s Service) Addr() string { return fmt.Sprintf(":%d", s.Port) }
