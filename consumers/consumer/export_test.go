package consumer

// InfraCause exposes infraCause to the external tests.
var InfraCause = infraCause

// SharedWaiting is how many runs wait for a lane.
func (r *Runtime) SharedWaiting() int {
	r.sched.mu.Lock()
	defer r.sched.mu.Unlock()
	return len(r.sched.pending)
}
