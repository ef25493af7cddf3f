package consumer

// InfraCause exposes infraCause to the external tests.
var InfraCause = infraCause

// SharedWaiting is how many runs wait for a lane.
func (r *Runtime) SharedWaiting() int {
	r.sched.mu.Lock()
	defer r.sched.mu.Unlock()
	return len(r.sched.pending)
}

// Keys are the idempotency keys of the marks, none for nil.
func (m *Marks) Keys() []string {
	if m == nil {
		return nil
	}
	keys := make([]string, len(m.marks))
	for i, mk := range m.marks {
		keys[i] = mk.key
	}
	return keys
}
