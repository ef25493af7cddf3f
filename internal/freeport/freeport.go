// Package freeport finds a free TCP port on 127.0.0.1 for a server that a
// child process will open later (PostgreSQL, PgBouncer, a consumer's
// HTTP_ADDR).
//
// Such a port is only free when it was checked: between the check and
// the child's bind, anything may take it. A port from the kernel's
// ephemeral range (what listening on ":0" hands out) is the likeliest to
// go, because every outgoing connection on the machine draws its local
// port from that same range, and one that does keeps it for as long as it
// stays open: a consumer that can never bind its HTTP_ADDR again. So the
// ports come from below that range, where only servers that chose a port
// bind.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// lowest is the lowest port handed out: above the well-known and most
// registered ones (PostgreSQL's 5432, PgBouncer's 6432, 8080, Kafka's
// 9092, the consumers' 91xx).
const lowest = 20000

// rangeFile holds the kernel's ephemeral range, "32768\t60999" by default.
const rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// given are the ports this process handed out: a server started with one
// binds it later, so a second call must not hand it out again meanwhile.
var given struct {
	sync.Mutex
	ports map[int]bool
}

// Loopback returns a port on 127.0.0.1 that was free a moment ago and not
// handed out before by this process, from below the ephemeral range when
// there is room there, else one the kernel picks.
func Loopback() (int, error) {
	given.Lock()
	defer given.Unlock()
	if given.ports == nil {
		given.ports = map[int]bool{}
	}
	if hi := ephemeralLow(); hi-lowest >= 1000 {
		for range 64 {
			p := lowest + rand.IntN(hi-lowest)
			if given.ports[p] {
				continue
			}
			if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
				l.Close()
				given.ports[p] = true
				return p, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port on 127.0.0.1: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Addr is Loopback as "127.0.0.1:port".
func Addr() (string, error) {
	p, err := Loopback()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(p), nil
}

// Free reports whether addr can be listened on now.
func Free(addr string) bool {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// ephemeralLow is the lowest port of the kernel's ephemeral range (32768
// when the range cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= 0 {
		return 32768
	}
	return n
}
