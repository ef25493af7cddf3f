package consumer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// httpHandler serves /metrics, /healthz (the process runs) and /readyz (the
// member joined its group, PostgreSQL answers, no partition is stuck).
func (r *Runtime) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{Registry: r.reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, req *http.Request) {
		if err := r.Ready(req.Context()); err != nil {
			// The reason may quote a database's or a broker's error: masked
			// as the process's log lines are.
			http.Error(w, r.redact(err.Error()), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	if r.cfg.Pprof { // opt-in: profiles of a running consumer (CONSUMER_PPROF)
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// ReadyPingBudget is how long Ready waits for PostgreSQL to answer.
const ReadyPingBudget = 2 * time.Second

// Ready reports why the consumer is not ready, or nil.
func (r *Runtime) Ready(ctx context.Context) error {
	if g := r.gate.Load(); g != nil {
		return errors.New(*g)
	}
	if e := r.assignErr.Load(); e != nil {
		return errors.New(*e)
	}
	if !r.joined.Load() {
		return fmt.Errorf("not yet a member of group %s", r.svc.Group)
	}
	ctx, cancel := context.WithTimeout(ctx, ReadyPingBudget)
	defer cancel()
	if err := r.db.PingContext(ctx); err != nil {
		return fmt.Errorf("postgresql: %w", err)
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	// A partition without progress past CONSUMER_STUCK_AFTER, and only
	// then (the contract): one that waits on the world says on what.
	for p, w := range r.workers {
		if !w.stuck(now, r.cfg.StuckAfter) {
			continue
		}
		if ws := w.waiting.Load(); ws != nil {
			return fmt.Errorf("partition %d waits on a failure that is not its message's own (cause %s, for %s): %s",
				p, ws.cause, now.Sub(ws.since).Round(time.Second), ws.reason)
		}
		return fmt.Errorf("partition %d made no progress for %s", p, now.Sub(time.Unix(0, w.lastProgress.Load())).Round(time.Second))
	}
	return nil
}
