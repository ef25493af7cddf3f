package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestLoopbackIsFreeAndBelowTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	room := low-lowest >= 1000 // else the kernel picks, from its range
	seen := map[int]bool{}
	for range 20 {
		p, err := Loopback()
		if err != nil {
			t.Fatal(err)
		}
		if room && (p < lowest || p >= low) {
			t.Fatalf("port %d: want one in [%d, %d), below the ports outgoing connections take", p, lowest, low)
		}
		if room && seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d was handed out as free: %v", p, err)
		}
		l.Close()
	}
}

func TestFreeSaysNoToAPortInUse(t *testing.T) {
	a, err := Addr()
	if err != nil {
		t.Fatal(err)
	}
	if !Free(a) {
		t.Fatalf("%s: handed out, then not free", a)
	}
	l, err := net.Listen("tcp", a)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if Free(a) {
		t.Fatalf("%s is listened on, and Free says it is free", a)
	}
}
