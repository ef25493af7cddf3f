package localpg

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pin-platform/pin/internal/freeport"
)

// ErrNoPgBouncer reports that the pgbouncer binary was not found.
var ErrNoPgBouncer = errors.New("localpg: pgbouncer is not installed (looked on $PATH and in /usr/sbin); install it with `apt-get install -y pgbouncer`")

// Bouncer is a running PgBouncer in front of a PostgreSQL server: the
// pooler of the tests that the consumers meet in production.
type Bouncer struct {
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

// BouncerOptions tune StartBouncer.
type BouncerOptions struct {
	// Users may log in (trusted, no password: the server behind trusts
	// local connections too). PgBouncer knows only the users it is told.
	Users []string
	// Mode is pool_mode; "" is transaction, where a client's consecutive
	// transactions may run on different server connections.
	Mode string
	// PoolSize is default_pool_size, the server connections per (database,
	// user); 0 is 4, few enough that clients share them.
	PoolSize int
}

// PgBouncerPath finds the pgbouncer binary.
func PgBouncerPath() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", ErrNoPgBouncer
}

// StartBouncer starts pgbouncer with a configuration of its own in dir (a
// directory MkdirTemp made), listening on 127.0.0.1 on a free port and
// pooling every database of the server at 127.0.0.1:pgPort. It waits until
// the first user can connect to database db through it. As root it runs as
// the "postgres" system user (PgBouncer refuses root).
func StartBouncer(ctx context.Context, dir string, pgPort int, db string, o BouncerOptions) (*Bouncer, error) {
	bin, err := PgBouncerPath()
	if err != nil {
		return nil, err
	}
	if len(o.Users) == 0 {
		return nil, errors.New("localpg: a bouncer needs its users")
	}
	if o.Mode == "" {
		o.Mode = "transaction"
	}
	if o.PoolSize == 0 {
		o.PoolSize = 4
	}
	port, err := freeport.Loopback()
	if err != nil {
		return nil, err
	}
	var users strings.Builder
	for _, u := range o.Users {
		fmt.Fprintf(&users, "%q \"\"\n", u)
	}
	conf := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 1000
server_reset_query =
ignore_startup_parameters = extra_float_digits
admin_users = %s
stats_users = %s
logfile = %s
`, pgPort, port, filepath.Join(dir, "users.txt"), o.Mode, o.PoolSize, o.Users[0], o.Users[0], filepath.Join(dir, "pgbouncer.log"))
	for name, body := range map[string]string{"users.txt": users.String(), "pgbouncer.ini": conf} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return nil, fmt.Errorf("localpg: %w", err)
		}
	}
	b := &Bouncer{dir: dir, port: port, done: make(chan struct{})}
	b.cmd = exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	b.cmd.Dir = dir
	if os.Geteuid() == 0 {
		cred, err := PostgresUser()
		if err != nil {
			return nil, err
		}
		b.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	if err := b.cmd.Start(); err != nil {
		return nil, fmt.Errorf("localpg: start pgbouncer: %w", err)
	}
	go func() { _ = b.cmd.Wait(); close(b.done) }()
	if err := b.wait(ctx, o.Users[0], db); err != nil {
		_ = b.Stop()
		return nil, err
	}
	return b, nil
}

// URLAs is the URL of database db through the bouncer, for user.
func (b *Bouncer) URLAs(user, db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", url.PathEscape(user), b.port, db)
}

// Port is the bouncer's TCP port.
func (b *Bouncer) Port() int { return b.port }

// Stop ends the bouncer (SIGTERM: its clients' connections are closed) and
// waits for it.
func (b *Bouncer) Stop() error {
	select {
	case <-b.done:
		return nil
	default:
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
		return nil
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
		return errors.New("localpg: pgbouncer did not stop on SIGTERM: killed")
	}
}

func (b *Bouncer) wait(ctx context.Context, user, db string) error {
	exited := func() error {
		select {
		case <-b.done:
			log, _ := os.ReadFile(filepath.Join(b.dir, "pgbouncer.log"))
			return fmt.Errorf("localpg: pgbouncer exited: %s", strings.TrimSpace(string(log)))
		default:
			return nil
		}
	}
	err := answers(ctx, b.URLAs(user, db), 30*time.Second, exited)
	if err != nil && exited() == nil {
		return fmt.Errorf("localpg: pgbouncer on port %s does not answer: %w", strconv.Itoa(b.port), err)
	}
	return err
}
