package bench

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"testing"
	"time"
)

// echoServer answers every connection with what it reads, until the
// client half-closes.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func proxied(t *testing.T, rtt time.Duration) (*latencyProxy, net.Conn) {
	t.Helper()
	p, err := startLatencyProxy(echoServer(t), rtt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, c
}

// Megabytes written in writes of random sizes while the echo comes back:
// every byte arrives, in order, through both directions, and the proxy
// passes on the half-close.
func TestLatencyProxyKeepsTheBytesAndTheirOrder(t *testing.T) {
	_, c := proxied(t, 2*time.Millisecond)
	data := make([]byte, 4<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	go func() {
		for rest := data; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(100_000))
			if _, err := c.Write(rest[:n]); err != nil {
				return
			}
			rest = rest[n:]
		}
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(c) // to the echo server's close: the half-close went through
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		i := 0
		for i < min(len(got), len(data)) && got[i] == data[i] {
			i++
		}
		t.Fatalf("got %d bytes, want %d; first difference at %d", len(got), len(data), i)
	}
}

// A request and its answer take at least the round trip the proxy adds,
// and not much more.
func TestLatencyProxyRoundTrip(t *testing.T) {
	const rtt = 20 * time.Millisecond
	_, c := proxied(t, rtt)
	b := []byte{0}
	for i := range 5 {
		start := time.Now()
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		d := time.Since(start)
		if d < rtt {
			t.Fatalf("round trip %d took %v, want ≥ %v", i, d, rtt)
		}
		if d > rtt+50*time.Millisecond {
			t.Fatalf("round trip %d took %v, want about %v", i, d, rtt)
		}
	}
}

// A stream of small writes pays the delay once: each chunk is due rtt/2
// after it arrived, not after the one before it was written.
func TestLatencyProxyPipelines(t *testing.T) {
	const rtt, n = 20 * time.Millisecond, 50
	p, c := proxied(t, rtt)
	done := make(chan time.Time, 1)
	go func() {
		b := make([]byte, n)
		if _, err := io.ReadFull(c, b); err != nil {
			t.Error(err)
		}
		for i := range b {
			if b[i] != byte(i) {
				t.Errorf("byte %d is %d", i, b[i])
			}
		}
		done <- time.Now()
	}()
	start := time.Now()
	for i := range n { // n writes about 1 ms apart: n chunks each way
		if _, err := c.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	lastWrite := time.Now()
	end := <-done
	// Serialised, the last byte would come back about n × rtt/2 after the
	// first write.
	if d := end.Sub(lastWrite); d > 3*rtt {
		t.Fatalf("the last byte came back %v after the last write (the writes took %v), want about %v", d, lastWrite.Sub(start), rtt)
	}
	if up, down := p.chunks(); up < n/2 || down < n/2 {
		t.Fatalf("%d chunks up, %d down: the writes were not separate chunks, the test proves nothing", up, down)
	}
}

// Close ends the open connections, an idle one and one with bytes still
// held, and returns.
func TestLatencyProxyClose(t *testing.T) {
	p, c := proxied(t, 200*time.Millisecond)
	idle, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // accepted, the bytes queued
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not return")
	}
	for _, cc := range []net.Conn{c, idle} {
		_ = cc.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.ReadAll(cc); err != nil {
			t.Fatalf("after Close, a client reads %v, want EOF", err)
		}
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("the proxy accepts after Close")
	}
}

// The proxy's waits are precise at the half of a 1 ms round trip, where
// time.Timer waits in the poller's whole milliseconds.
func TestSleeperPrecision(t *testing.T) {
	s := newSleeper()
	defer s.close()
	const d = 500 * time.Microsecond
	var took []time.Duration
	for range 41 {
		start := time.Now()
		s.until(start.Add(d))
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	med := took[len(took)/2]
	t.Logf("a wait of %v: median %v, max %v", d, med, took[len(took)-1])
	if took[0] < d {
		t.Fatalf("a wait of %v returned after %v", d, took[0])
	}
	if med > 900*time.Microsecond {
		t.Fatalf("a wait of %v takes %v (median)", d, med)
	}
}
