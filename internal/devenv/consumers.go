package devenv

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pin-platform/pin/consumers/roster"
	"github.com/pin-platform/pin/internal/freeport"
	"github.com/pin-platform/pin/internal/kafkaenv"
)

// BinDir is the directory of the consumer binaries: the one pinctl runs
// from, where `make build` puts them all.
func BinDir() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find pinctl's directory: %w", err)
	}
	dir := filepath.Dir(exe)
	for _, svc := range roster.All {
		if s := svc.Binary(); !exists(filepath.Join(dir, s)) {
			return "", fmt.Errorf("%s not found beside pinctl in %s: run `make build` (make run does)", s, dir)
		}
	}
	return dir, nil
}

// Consumer is a consumer binary running as a child process.
type Consumer struct {
	Service string // messenger, rewards or crm
	Addr    string // its HTTP_ADDR: /metrics, /healthz, /readyz

	cmd  *exec.Cmd
	done chan struct{}
	code int
}

// StartConsumer starts binDir/<service>-consumers with env, and HTTP_ADDR
// on 127.0.0.1 at the service's default port when it is free, else at a
// free one. The process's stdout and stderr go to out, which is closed,
// when it is an io.Closer, once the process has ended.
func StartConsumer(binDir, service string, env []string, out io.Writer) (*Consumer, error) {
	addr := freeAddr(defaultPort(service))
	cmd := exec.Command(filepath.Join(binDir, service+"-consumers"))
	cmd.Env = append(env[:len(env):len(env)], "HTTP_ADDR="+addr)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		if c, ok := out.(io.Closer); ok {
			c.Close()
		}
		return nil, fmt.Errorf("start %s: %w", service, err)
	}
	c := &Consumer{Service: service, Addr: addr, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		if cl, ok := out.(io.Closer); ok {
			cl.Close()
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			c.code = ee.ExitCode()
		}
		close(c.done)
	}()
	return c, nil
}

// Pid is the process's id.
func (c *Consumer) Pid() int { return c.cmd.Process.Pid }

// Done is closed once the process has ended.
func (c *Consumer) Done() <-chan struct{} { return c.done }

// ExitCode is the process's exit code once Done is closed (-1: ended by a
// signal).
func (c *Consumer) ExitCode() int { return c.code }

// StopConsumers sends SIGTERM to every consumer still running and waits
// for each (30 s, then SIGKILL). It returns the first non-zero exit code.
func StopConsumers(cs ...*Consumer) int {
	code := 0
	for _, c := range cs {
		select {
		case <-c.done:
			continue
		default:
		}
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range cs {
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
		if c.code != 0 && code == 0 {
			code = c.code
		}
	}
	return code
}

// defaultPort is a service's default HTTP port (the roster's).
func defaultPort(service string) int {
	s, _ := roster.Named(service)
	return s.Port
}

// freeAddr is 127.0.0.1:port when that port is free, else a free one.
func freeAddr(port int) string {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if freeport.Free(addr) {
		return addr
	}
	if a, err := freeport.Addr(); err == nil {
		return a
	}
	return addr
}

// NewLoadProducer is the idempotent producer pinctl feeds topics with (the
// dev scenario, the benchmark's loads): lingerMs batches sends, 0 sends
// each message at once.
func NewLoadProducer(brokers string, lingerMs int) (*kafka.Producer, error) {
	p, err := kafka.NewProducer(kafkaenv.Client(brokers, kafka.ConfigMap{
		"enable.idempotence":           true,
		"linger.ms":                    lingerMs,
		"queue.buffering.max.messages": 1000000,
	}))
	if err != nil {
		return nil, fmt.Errorf("kafka producer: %w", err)
	}
	return p, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
