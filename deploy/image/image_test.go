//go:build image

package image

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/demo"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/consumers/rewards"
	"github.com/pin-platform/pin/consumers/roster"
	"github.com/pin-platform/pin/consumers/servicetest"
	"github.com/pin-platform/pin/internal/freeport"
	"github.com/pin-platform/pin/migrate"
	"github.com/pin-platform/pin/migrate/pgtest"
)

func TestMain(m *testing.M) { servicetest.Main(m) }

// brokerHost is the name the consumer in the image reaches the broker by.
const brokerHost = "pin-image-test-broker"

// drain is the consumer's CONSUMER_DRAIN_TIMEOUT here, and the time the
// engine gives it between SIGTERM and SIGKILL on stop.
const drain = 10 * time.Second

// engine is the container engine command make image-test passes
// (PIN_CONTAINER: "podman --runtime …"), and the image (PIN_IMAGE).
type engine struct {
	t     *testing.T
	argv  []string
	image string
}

func newEngine(t *testing.T) engine {
	t.Helper()
	argv, image := strings.Fields(os.Getenv("PIN_CONTAINER")), os.Getenv("PIN_IMAGE")
	if len(argv) == 0 || image == "" {
		t.Fatal("PIN_CONTAINER and PIN_IMAGE are unset: run make image image-test")
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		t.Fatalf("%s: %v (apt-get install -y podman runc)", argv[0], err)
	}
	return engine{t: t, argv: argv, image: image}
}

// run runs the engine with args and env added to the test's environment
// (so a database URL is passed by name, never on a command line). It
// returns the output and the exit code.
func (e engine) run(env []string, args ...string) (string, int) {
	e.t.Helper()
	cmd := exec.Command(e.argv[0], append(e.argv[1:], args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), ee.ExitCode()
	}
	if err != nil {
		e.t.Fatalf("%s %s: %v", e.argv[0], strings.Join(args, " "), err)
	}
	return out.String(), 0
}

// must is run that fails the test unless the command exits 0.
func (e engine) must(env []string, args ...string) string {
	e.t.Helper()
	out, code := e.run(env, args...)
	if code != 0 {
		e.t.Fatalf("%s %s: exit %d\n%s", e.argv[0], strings.Join(args, " "), code, out)
	}
	return strings.TrimSpace(out)
}

// hardened are the run flags of every container here: the host network
// (the test's PostgreSQL and broker are on loopback), a read-only root
// without the engine's writable /tmp, no capability, no privilege
// escalation, the image's own user.
var hardened = []string{"--network", "host", "--read-only", "--read-only-tmpfs=false",
	"--cap-drop", "ALL", "--security-opt", "no-new-privileges"}

func TestImage(t *testing.T) {
	e := newEngine(t)
	start := time.Now()
	defer func() { t.Logf("image test: %s", time.Since(start).Round(time.Millisecond)) }()

	// The image runs as a numeric user other than root.
	user := e.must(nil, "image", "inspect", "--format", "{{.Config.User}}", e.image)
	uid, _, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Fatalf("the image's user is %q: want a numeric user other than 0", user)
	}

	// Its pinctl migrates a fresh database, as the owner.
	s := roster.Rewards
	env := servicetest.New(t, s.New, s.Partitions) // the broker with the topic and DLQ
	fresh := pgtest.NewEmptyDB(t)
	out := e.must([]string{"DATABASE_URL=" + fresh},
		append(append([]string{"run", "--rm"}, hardened...), "-e", "DATABASE_URL", e.image, "pinctl", "migrate", "apply")...)
	t.Logf("pinctl migrate apply (in the image):\n%s", out)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, err := migrate.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	st, err := migrate.Status(ctx, fresh, dir)
	if err != nil {
		t.Fatal(err)
	}
	latest, err := migrate.Latest()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Pending) > 0 || st.Current() == nil || st.Current().Version != latest {
		t.Fatalf("after the image's migrate apply: %d files pending, current %v, want %s", len(st.Pending), st.Current(), latest)
	}
	db, err := sql.Open("postgres", fresh)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	env.DB, env.URL = db, fresh // the checks below read the database the image migrated

	// Its consumer, on that database as the service's own login.
	port := freePort(t)
	name := "pin-image-test-" + randomHex(4)
	// The brokers by a name only the container's /etc/hosts has (the
	// engine's --add-host), so that librdkafka resolves it in the image:
	// glibc resolves names itself (the image has no NSS modules), from
	// /etc/hosts first as the image's nsswitch.conf says (without it,
	// glibc asks DNS first and takes its "no such name" for an answer).
	bootstrap := strings.ReplaceAll(env.Cluster.Bootstrap, "127.0.0.1:", brokerHost+":")
	if bootstrap == env.Cluster.Bootstrap {
		t.Fatalf("the broker's bootstrap %q names no 127.0.0.1", env.Cluster.Bootstrap)
	}
	e.must([]string{"KAFKA_BOOTSTRAP_SERVERS=" + bootstrap, "DATABASE_URL=" + pgtest.ServiceURL(t, fresh, s.Name())},
		append(append([]string{"run", "-d", "--name", name, "--add-host", brokerHost + ":127.0.0.1"}, hardened...),
			"-e", "KAFKA_BOOTSTRAP_SERVERS", "-e", "DATABASE_URL",
			"-e", fmt.Sprintf("HTTP_ADDR=127.0.0.1:%d", port),
			"-e", "CONSUMER_DRAIN_TIMEOUT="+drain.String(),
			"-e", "KAFKA_SESSION_TIMEOUT_MS=6000",
			e.image, s.Binary())...)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := e.run(nil, "logs", name)
			t.Logf("the consumer's log:\n%s", logs)
		}
		e.run(nil, "rm", "-f", name)
	})

	// /readyz: 200 once it has its partitions.
	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", port)
	kafkatest.Eventually(t, servicetest.Wait, func() bool { return get(readyz) == http.StatusOK },
		"%s never answered 200 (last %d)", readyz, get(readyz))

	// One event applied, one poison message dead-lettered.
	bond, referred := uuid.New(), uuid.New()
	now := time.Now().UTC().Truncate(time.Microsecond)
	good := demo.BondCreated(bond, referred, uuid.New(), 1, now)
	poison := servicetest.Envelope{MessageID: uuid.New(), EventType: rewards.EventTypeBondCreated, CreatedAt: now,
		AggregateID: uuid.New(), AggregateType: "ReferralBond", Payload: "not an object"}.Message(uuid.New(), -1, nil)
	tps := env.Produce(kafkatest.Message{Partition: -1, Key: good.Key, Value: good.Value}, poison)
	env.AwaitOutcome(rewards.EventTypeBondCreated, good.MessageID, rewards.OutcomeCreated)
	if n := env.Count(`SELECT count(*) FROM referral_bond_replicas WHERE bond_id = $1 AND status = 'Active'`, bond); n != 1 {
		t.Errorf("%d rows for bond %s, want 1", n, bond)
	}
	dls := env.AwaitDLQ(1)
	env.CheckDeadLetter(t, dls[0], poison, tps[1], s.InvalidCode(), 1)

	// Stopped: it drains, commits, leaves its group and exits 0 before the
	// engine's SIGKILL at the drain timeout.
	stopped := time.Now()
	e.must(nil, "stop", "--time", strconv.Itoa(int(drain.Seconds())), name)
	t.Logf("stopped in %s (drain timeout %s)", time.Since(stopped).Round(time.Millisecond), drain)
	if code := e.must(nil, "inspect", "--format", "{{.State.ExitCode}}", name); code != "0" {
		t.Errorf("the consumer exited %s on stop, want 0", code)
	}
	env.AwaitCommitted(s.Group(), env.Produced())
}

// get is the status code of a GET of url (0: no answer).
func get(url string) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := freeport.Loopback()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
