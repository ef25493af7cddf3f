package chaos

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pin-platform/pin/internal/freeport"
)

// instance is one consumer process of a group: the real binary, killed
// and started again by the faults.
type instance struct {
	name    string // e.g. "rewards#2"
	bin     string
	env     []string
	logPath string

	// faults serialises the faults that stop and start the process: a
	// second kill waits until the first one's process is back.
	faults sync.Mutex

	mu       sync.Mutex
	addr     string // HTTP_ADDR
	cmd      *exec.Cmd
	done     chan struct{}
	expected bool // the running process's end is ours (a kill, a stop)
	code     int
}

// exit is a process's end that nobody asked for.
type exit struct {
	in   *instance
	code int
}

// start runs the binary, its output appended to its log. exits hears of
// an end that was not asked for.
func (in *instance) start(exits chan<- exit) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.done != nil {
		select {
		case <-in.done:
		default:
			return fmt.Errorf("start %s: it runs already (pid %d)", in.name, in.cmd.Process.Pid)
		}
	}
	// A port that went while the process was down (the bind of another
	// server) is left for another: the process would only exit 2 on it.
	if !freeport.Free(in.addr) {
		if a, err := freeport.Addr(); err == nil {
			in.addr = a
		}
	}
	f, err := os.OpenFile(in.logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(in.bin)
	cmd.Env = append(in.env[:len(in.env):len(in.env)], "HTTP_ADDR="+in.addr)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", in.name, err)
	}
	done := make(chan struct{})
	in.cmd, in.done, in.expected = cmd, done, false
	go func() {
		err := cmd.Wait()
		f.Close()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		in.mu.Lock()
		in.code = code
		expected := in.expected
		in.mu.Unlock()
		close(done)
		if !expected {
			exits <- exit{in, code}
		}
	}()
	return nil
}

// pid is the running process's id.
func (in *instance) pid() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd == nil || in.cmd.Process == nil {
		return 0
	}
	return in.cmd.Process.Pid
}

// kill ends the process with SIGKILL (kill -9) and waits for its end.
func (in *instance) kill() {
	in.mu.Lock()
	in.expected = true
	cmd, done := in.cmd, in.done
	in.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// stop asks the process to end (SIGTERM: drain, commit, exit 0), kills it
// after grace, and returns its exit code (-1 when it had to be killed).
func (in *instance) stop(grace time.Duration) int {
	in.mu.Lock()
	in.expected = true
	cmd, done := in.cmd, in.done
	in.mu.Unlock()
	if cmd == nil {
		return 0
	}
	select {
	case <-done:
		return in.exitCode()
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return in.exitCode()
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
		return -1
	}
}

func (in *instance) exitCode() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.code
}

// ready reports whether the process answers /readyz with 200.
func (in *instance) ready() bool {
	c := http.Client{Timeout: time.Second}
	in.mu.Lock()
	addr := in.addr
	in.mu.Unlock()
	resp, err := c.Get("http://" + addr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// consumerBinary is the path of a service's binary in dir.
func consumerBinary(dir, service string) (string, error) {
	p := filepath.Join(dir, service+"-consumers")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s not found in %s: run `make build`", filepath.Base(p), dir)
	}
	return p, nil
}

// lastLine is the last line of the log at path, at most 512 bytes of it:
// what a process that exited by itself said last.
func lastLine(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	buf := make([]byte, 4096)
	n, _ := f.ReadAt(buf, 0)
	if st, err := f.Stat(); err == nil && st.Size() > int64(len(buf)) {
		n, _ = f.ReadAt(buf, st.Size()-int64(len(buf)))
	}
	lines := strings.Split(strings.TrimRight(string(buf[:n]), "\n"), "\n")
	last := lines[len(lines)-1]
	if len(last) > 512 {
		last = last[:512] + "…"
	}
	return last
}
