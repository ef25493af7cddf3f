// Package localpg runs a private PostgreSQL server from the system's
// binaries: the throwaway dev database of `pinctl migrate diff`, the one
// server of a test run, and the embedded default of `make run`.
//
// The server listens on 127.0.0.1 on a free port, trusts local connections
// and keeps its data in a directory the caller chooses. initdb refuses to run
// as root, so when the process is root the server runs as the "postgres"
// system user, which then owns the data directory.
package localpg

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/lib/pq" // database/sql driver "postgres"

	"github.com/pin-platform/pin/internal/freeport"
)

// Server is a running local PostgreSQL server.
type Server struct {
	dir  string // data directory
	bin  string // directory of the server binaries
	port int
	cred *syscall.Credential
}

// Options tune Start.
type Options struct {
	// Durable keeps fsync on. Tests and throwaway dev databases turn it off
	// (the default) because they never survive a crash anyway.
	Durable bool
	// Port to listen on; 0 picks a free one. A data directory that already
	// holds a running server keeps its port.
	Port int
	// Settings are extra server settings, each name=value (a -c of the
	// server's command line, after the defaults; no spaces or quotes), e.g.
	// shared_preload_libraries=pg_stat_statements. A data directory that
	// already holds a running server keeps its settings.
	Settings []string
}

// ErrNoBinaries reports that no PostgreSQL server binaries were found.
var ErrNoBinaries = errors.New("localpg: no PostgreSQL server binaries found (looked in $PG_BIN, /usr/lib/postgresql/*/bin and $PATH); install them with `apt-get install -y postgresql`")

// LibDir is the directory of the server's loadable modules (pg_config
// --pkglibdir beside the binaries BinDir finds, else their ../lib).
func LibDir() (string, error) {
	bin, err := BinDir()
	if err != nil {
		return "", err
	}
	if out, err := exec.Command(filepath.Join(bin, "pg_config"), "--pkglibdir").Output(); err == nil {
		if d := strings.TrimSpace(string(out)); d != "" {
			return d, nil
		}
	}
	return filepath.Join(filepath.Dir(bin), "lib"), nil
}

// BinDir finds the directory of initdb, pg_ctl and postgres: $PG_BIN, else
// the newest /usr/lib/postgresql/*/bin, else the directory of initdb on $PATH.
func BinDir() (string, error) {
	if d := os.Getenv("PG_BIN"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", ErrNoBinaries
}

func pgVersion(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// Start initialises dir if it holds no cluster yet, then starts the server,
// or attaches to the server already running on dir. It waits until the
// server accepts connections.
func Start(ctx context.Context, dir string, opts Options) (*Server, error) {
	for _, kv := range opts.Settings {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.ContainsAny(kv, " \t\n'\"\\") {
			return nil, fmt.Errorf("localpg: setting %q is not name=value without spaces or quotes", kv)
		}
	}
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		s.cred, err = PostgresUser()
		if err != nil {
			return nil, err
		}
	}
	// The parents must be reachable by the server's user; the data
	// directory itself is private to it.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("localpg: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("localpg: %w", err)
	}
	if s.cred != nil {
		if err := os.Chown(dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return nil, fmt.Errorf("localpg: %w", err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := s.run(ctx, "initdb", "-D", dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8"); err != nil {
			return nil, err
		}
	}
	if port, ok := s.runningPort(); ok {
		s.port = port
		return s, s.wait(ctx)
	}
	// A port this process picked can still be taken by another process
	// (a test binary running beside this one) before the server binds it:
	// then it starts again on another.
	for attempt := 1; ; attempt++ {
		s.port = opts.Port
		if s.port == 0 {
			if s.port, err = pickPort(); err != nil {
				return nil, err
			}
		}
		logPath := filepath.Join(dir, "server.log")
		logged := fileSize(logPath)
		err = s.run(ctx, "pg_ctl", "start", "-w", "-t", "60", "-D", dir, "-l", logPath, "-o", strings.Join(s.conf(opts), " "))
		if err == nil {
			break
		}
		if opts.Port != 0 || attempt == bindAttempts || !portTaken(logPath, logged) {
			return nil, err
		}
	}
	return s, s.wait(ctx)
}

// conf is the server's command line: its defaults, then opts.Settings.
func (s *Server) conf(opts Options) []string {
	conf := []string{
		"-c listen_addresses=127.0.0.1",
		"-p " + strconv.Itoa(s.port),
		"-k " + s.dir, // unix socket beside the data, never in a shared /var/run
		"-c max_connections=200",
	}
	if !opts.Durable {
		conf = append(conf, "-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off")
	}
	for _, kv := range opts.Settings {
		conf = append(conf, "-c "+kv)
	}
	return conf
}

// pickPort picks the port of a server Start starts (a variable: a test
// makes its first pick a taken one).
var pickPort = freeport.Loopback

// bindAttempts is how many ports Start tries when the one it picked was
// taken before the server bound it.
const bindAttempts = 3

// portTaken says whether the log at path, from offset from on, says the
// server could not listen because its port was in use.
func portTaken(path string, from int64) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return false
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	return err == nil && strings.Contains(string(b), "Address already in use")
}

// fileSize is the size of the file at path, 0 when there is none.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// URL is the server's connection URL for database db.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

// URLAs is the URL of database db for user (the server trusts local
// connections: no password).
func (s *Server) URLAs(user, db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", url.PathEscape(user), s.port, db)
}

// Port is the server's TCP port.
func (s *Server) Port() int { return s.port }

// Stop shuts the server down (fast mode: open sessions are ended).
func (s *Server) Stop() error {
	return s.run(context.Background(), "pg_ctl", "stop", "-w", "-m", "fast", "-D", s.dir)
}

func (s *Server) run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
	out, err := cmd.CombinedOutput()
	if err != nil {
		err = fmt.Errorf("localpg: %s %s: %w", name, strings.Join(args, " "), err)
		if out := strings.TrimSpace(string(out)); out != "" {
			err = fmt.Errorf("%w\n%s", err, out)
		}
		return err
	}
	return nil
}

// runningPort reads postmaster.pid of a live server on dir.
func (s *Server) runningPort() (int, bool) {
	b, err := os.ReadFile(filepath.Join(s.dir, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return 0, false
	}
	pid, err1 := strconv.Atoi(strings.TrimSpace(lines[0]))
	port, err2 := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err1 != nil || err2 != nil {
		return 0, false
	}
	if p, err := os.FindProcess(pid); err != nil || p.Signal(syscall.Signal(0)) != nil {
		return 0, false
	}
	return port, true
}

func (s *Server) wait(ctx context.Context) error {
	err := answers(ctx, s.URL("postgres"), 60*time.Second, func() error { return nil })
	if err != nil {
		return fmt.Errorf("localpg: server on %s does not answer: %w", s.dir, err)
	}
	return nil
}

// answers waits until the server at url answers a ping, for at most
// within; gone, checked between pings, ends the wait with its error (a
// process that exited).
func answers(ctx context.Context, url string, within time.Duration, gone func() error) error {
	db, err := sql.Open("postgres", url)
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(within)
	for {
		err := db.PingContext(ctx)
		if err == nil {
			return nil
		}
		if gerr := gone(); gerr != nil {
			return gerr
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// MkdirTemp makes a fresh temporary directory that the server's user can
// own and reach.
func MkdirTemp(pattern string) (string, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", err
	}
	if os.Geteuid() == 0 {
		cred, err := PostgresUser()
		if err != nil {
			return "", err
		}
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// PostgresUser is the credential of the "postgres" system user: what a
// PostgreSQL server, and its client tools, run as when the caller is root.
func PostgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("localpg: running as root needs the \"postgres\" system user (installed with the postgresql package): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// Standby makes a hot standby of s in dir with pg_basebackup -R (streaming
// from s, read-only until promoted) and starts it on a free port.
func (s *Server) Standby(ctx context.Context, dir string) (*Server, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	st := &Server{dir: dir, bin: s.bin, cred: s.cred}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("localpg: %w", err)
	}
	if s.cred != nil {
		if err := os.Chown(dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return nil, fmt.Errorf("localpg: %w", err)
		}
	}
	if err := st.run(ctx, "pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", "postgres",
		"-D", dir, "-R", "-X", "stream", "-c", "fast"); err != nil {
		return nil, err
	}
	return Start(ctx, dir, Options{})
}

// Promote turns a standby into a primary (pg_ctl promote) and waits until
// it accepts writes.
func (s *Server) Promote(ctx context.Context) error {
	return s.run(ctx, "pg_ctl", "promote", "-w", "-t", "60", "-D", s.dir)
}

// Crash stops the server the way a power cut would (immediate mode: no
// checkpoint, recovery from the WAL at the next start).
func (s *Server) Crash(ctx context.Context) error {
	return s.run(ctx, "pg_ctl", "stop", "-w", "-m", "immediate", "-D", s.dir)
}

// Restart starts a stopped server again on its port.
func (s *Server) Restart(ctx context.Context) error {
	_, err := Start(ctx, s.dir, Options{Port: s.port})
	return err
}
