package consumer

// InfraCause exposes infraCause to the external tests.
var InfraCause = infraCause

// SharedWaiting is how many runs wait for a shared transaction's lane.
func (r *Runtime) SharedWaiting() int {
	r.share.mu.Lock()
	defer r.share.mu.Unlock()
	return len(r.share.pending)
}
