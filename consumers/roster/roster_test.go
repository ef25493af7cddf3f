package roster

import "testing"

// No two entries share a name, a topic, a group, a DLQ or a port, and each
// has partitions, a port and an invalid code.
func TestEntriesAreDistinct(t *testing.T) {
	seen := map[string]string{}
	once := func(kind, v, name string) {
		if other, dup := seen[kind+v]; dup {
			t.Errorf("%s and %s share the %s %s", other, name, kind, v)
		}
		seen[kind+v] = name
	}
	for _, s := range All {
		if s.Partitions < 1 || s.Port < 1 || s.InvalidCode() == "" {
			t.Errorf("%s: partitions %d, port %d, invalid code %q", s.Name(), s.Partitions, s.Port, s.InvalidCode())
		}
		once("name", s.Name(), s.Name())
		once("topic", s.Topic(), s.Name())
		once("group", s.Group(), s.Name())
		once("DLQ", s.DLQTopic(), s.Name())
		once("port", s.Addr(), s.Name())
		if got, ok := Named(s.Name()); !ok || got.Topic() != s.Topic() {
			t.Errorf("Named(%q) = %v, %v", s.Name(), got.Port, ok)
		}
	}
}
