package bench

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// latencyProxy is a TCP proxy that puts its target rtt away (--db-latency):
// each direction holds every chunk it reads for rtt/2 from the moment it
// arrived, then writes it on. The bytes of a direction keep their order;
// chunks queue behind each other only as long as they arrived after each
// other, so nothing caps the bandwidth and a pipelined stream pays the
// delay once, not per chunk.
type latencyProxy struct {
	ln     net.Listener
	target string
	half   time.Duration

	wg     sync.WaitGroup // the accept loop and every connection's
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool

	// Chunks (reads) forwarded towards the target and back, for the
	// record: a round trip is about one of each.
	up, down atomic.Int64
}

// proxyQueue is how many chunks a direction holds before its reader waits
// for the writer: at the 64 KiB of a read, far more than a delay of a few
// milliseconds fills on one machine.
const proxyQueue = 4096

// startLatencyProxy listens on a free port of 127.0.0.1 and forwards each
// connection to target with rtt added to every round trip.
func startLatencyProxy(target string, rtt time.Duration) (*latencyProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &latencyProxy{ln: ln, target: target, half: rtt / 2, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *latencyProxy) Addr() string { return p.ln.Addr().String() }

// chunks returns how many reads the proxy forwarded towards the target
// and back so far.
func (p *latencyProxy) chunks() (up, down int64) { return p.up.Load(), p.down.Load() }

// Close stops accepting, ends every open connection and waits until each
// of its goroutines is gone.
func (p *latencyProxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *latencyProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// track registers the connections for Close; false once Close began.
func (p *latencyProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *latencyProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

func (p *latencyProxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer client.Close()
	server, err := net.DialTimeout("tcp", p.target, 10*time.Second)
	if err != nil {
		return
	}
	defer server.Close()
	if !p.track(client, server) {
		return
	}
	defer p.untrack(client, server)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(server, client, &p.up) }()
	go func() { defer wg.Done(); p.pipe(client, server, &p.down) }()
	wg.Wait()
}

// delayed is one read of a direction and when it arrived.
type delayed struct {
	at time.Time
	b  []byte
}

// pipe forwards src to dst, each chunk rtt/2 after it arrived: a reader
// stamps and queues the chunks, the caller writes them when due. At src's
// end it half-closes dst once the queue is written; on a write error it
// closes both, which ends the other direction too.
func (p *latencyProxy) pipe(dst, src net.Conn, n *atomic.Int64) {
	q := make(chan delayed, proxyQueue)
	go func() {
		defer close(q)
		buf := make([]byte, 64<<10)
		for {
			k, err := src.Read(buf)
			if k > 0 {
				q <- delayed{at: time.Now(), b: bytes.Clone(buf[:k])}
			}
			if err != nil {
				return
			}
		}
	}()
	s := newSleeper()
	defer s.close()
	failed := false
	for c := range q {
		if failed {
			continue // drain: the reader ends once src is closed
		}
		s.until(c.at.Add(p.half))
		if _, err := dst.Write(c.b); err != nil {
			failed = true
			dst.Close()
			src.Close()
			continue
		}
		n.Add(1)
	}
	if !failed {
		if hc, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = hc.CloseWrite()
		}
	}
}

// timerSleeper waits with time.Timer: where the runtime's poller waits in
// whole milliseconds (Linux's epoll), a wait of 0.5 ms takes about 1.1 ms
// when the process has nothing else to do. latency_linux.go waits on a
// timerfd instead.
type timerSleeper struct{ t *time.Timer }

func newTimerSleeper() *timerSleeper {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &timerSleeper{t: t}
}

func (s *timerSleeper) until(at time.Time) {
	d := time.Until(at)
	if d <= 0 {
		return
	}
	s.t.Reset(d)
	<-s.t.C
}

func (s *timerSleeper) close() { s.t.Stop() }

// sleeper waits until an instant.
type sleeper interface {
	until(at time.Time)
	close()
}

// LatencyProxy puts target rtt away for another package's tests (a
// consumer's view of a database a millisecond off): the proxy's address,
// and the function that stops it.
func LatencyProxy(target string, rtt time.Duration) (addr string, stop func() error, err error) {
	p, err := startLatencyProxy(target, rtt)
	if err != nil {
		return "", nil, err
	}
	return p.Addr(), p.Close, nil
}
