// Package devenv is the dev environment of `make run` (`pinctl dev`, Run):
// PostgreSQL, a broker, the migrations, the three consumer binaries, a demo
// scenario that touches every path of the consumers, and a report of what
// happened. Its parts that set up a local PostgreSQL as production has it
// (SetUpDatabase, ServiceURL) and run the consumer binaries (BinDir,
// StartConsumer, StopConsumers, NewLoadProducer) serve the benchmark too.
package devenv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pin-platform/pin/consumers/demo"
	"github.com/pin-platform/pin/migrate"
	"github.com/pin-platform/pin/migrate/localpg"
)

// Options are the arguments of Run: `pinctl dev`'s.
type Options struct {
	Once           bool          // exit after the summary (an error when the outcome is not the expected one)
	Events         int           // also produce this many events of realistic load, with a progress bar
	DataDir        string        // the local PostgreSQL's data is DataDir/postgres, kept between runs
	RetryTimeScale string        // RETRY_TIME_SCALE of the consumers
	Quiet          bool          // no line per processed event
	Timeout        time.Duration // how long to wait for the consumers to catch up
	Out            io.Writer     // where everything is printed
	TTY            bool          // Out is a terminal (term.IsTerminal): the progress bars redraw in place
}

// Run starts PostgreSQL — a local server from the system's binaries under
// o.DataDir, or $DATABASE_URL — and the broker — librdkafka's mock cluster
// with the topics of docs/contract.md §3, or $KAFKA_BOOTSTRAP_SERVERS —,
// applies the migrations, starts the three consumers (the real binaries,
// beside pinctl), provisions the demo's chats and leads, produces the
// scenario (and o.Events events of load), waits until every offset is
// committed and nothing is parked, prints each processed event, a summary
// read back from PostgreSQL and the DLQs, and checks the scenario's
// expected outcome. Unless o.Once it then waits for ctx to end. It stops
// what it started. The error says when a consumer exited with a non-zero
// code or the outcome was not the expected one.
func Run(ctx context.Context, o Options) error {
	d := &devEnv{opts: o, out: o.Out}
	return d.run(ctx)
}

// devEnv is one run of the environment.
type devEnv struct {
	opts    Options
	out     io.Writer
	mu      sync.Mutex // serialises output lines
	dbURL   string     // the superuser's, on the local server: the scenario plays other components
	brokers string
	db      *sql.DB
	// perService: each consumer runs as its service's login (ServiceURL),
	// on the local server; else as dbURL's user.
	perService bool
}

func (d *devEnv) say(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, format+"\n", args...)
}

func (d *devEnv) run(ctx context.Context) error {
	bin, err := BinDir()
	if err != nil {
		return err
	}

	// PostgreSQL. On the local server the migrations run as the schema's
	// owner and each consumer as its service's login (README, "Database
	// roles"); a $DATABASE_URL serves everything as it is.
	var applied []string
	if u := os.Getenv("DATABASE_URL"); u != "" {
		d.dbURL = u
		d.say("▸ PostgreSQL: $DATABASE_URL (%s)", migrate.Redact(u))
		dir, err := migrate.Embedded()
		if err != nil {
			return err
		}
		if applied, err = migrate.Apply(ctx, u, dir); err != nil {
			return err
		}
	} else {
		dir := filepath.Join(d.opts.DataDir, "postgres")
		d.say("▸ PostgreSQL: starting the local server in %s …", dir)
		srv, err := localpg.Start(ctx, dir, localpg.Options{Durable: true})
		if err != nil {
			return fmt.Errorf("start PostgreSQL in %s: %w", dir, err)
		}
		defer func() {
			if err := srv.Stop(); err != nil {
				d.say("! stopping PostgreSQL: %v", err)
			}
		}()
		if d.dbURL, applied, err = SetUpDatabase(ctx, srv.URL("postgres"), "pin"); err != nil {
			return err
		}
		d.perService = true
	}
	if len(applied) == 0 {
		d.say("▸ migrations: up to date")
	} else {
		d.say("▸ migrations: %d applied (%s)", len(applied), strings.Join(applied, ", "))
	}
	if d.db, err = sql.Open("postgres", d.dbURL); err != nil {
		return fmt.Errorf("open the database: %w", err)
	}
	defer d.db.Close()

	// Kafka.
	if b := os.Getenv("KAFKA_BOOTSTRAP_SERVERS"); b != "" {
		d.brokers = b
		d.say("▸ Kafka: $KAFKA_BOOTSTRAP_SERVERS (%s); the topics must exist", b)
	} else {
		mc, err := kafka.NewMockCluster(1)
		if err != nil {
			return fmt.Errorf("start the in-process broker: %w", err)
		}
		defer mc.Close()
		for _, t := range demo.Topics {
			for _, name := range []string{t.Name, t.DLQ} {
				if err := mc.CreateTopic(name, t.Partitions, 1); err != nil {
					return fmt.Errorf("create topic %s: %w", name, err)
				}
			}
		}
		d.brokers = mc.BootstrapServers()
		d.say("▸ Kafka: in-process broker at %s with the topics of docs/contract.md §3", d.brokers)
	}

	// The consumers.
	ctx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	procs, err := d.startConsumers(bin)
	if err != nil {
		return err
	}
	defer StopConsumers(procs...)
	if err := d.waitReady(ctx, procs); err != nil {
		return err
	}

	// The scenario.
	p, err := newDevProducer(d.brokers)
	if err != nil {
		return err
	}
	defer p.close()
	start := d.watermarks()
	sc := demo.NewScenario(time.Now())
	if err := d.play(ctx, p, sc.Setup); err != nil {
		return err
	}
	if err := d.play(ctx, p, sc.Steps); err != nil {
		return err
	}
	if d.opts.Events > 0 {
		if err := d.load(ctx, p, d.opts.Events); err != nil {
			return err
		}
	}
	if err := d.waitCaughtUp(ctx); err != nil {
		d.say("! %v", err)
	}
	bad := sc.Check(ctx, d.db)
	bad = append(bad, d.checkDLQ(sc, start)...)
	d.summary(procs)
	if len(bad) == 0 {
		d.say("\n✔ the scenario reached its expected outcome")
	} else {
		d.say("\n✘ the scenario did not reach its expected outcome:")
		for _, b := range bad {
			d.say("  - %s", b)
		}
	}
	if !d.opts.Once {
		d.say("\nThe consumers keep running. Ctrl-C stops everything.")
		<-ctx.Done()
		d.say("\n▸ stopping …")
	}
	if code := StopConsumers(procs...); code != 0 {
		return fmt.Errorf("a consumer exited with code %d", code)
	}
	if len(bad) > 0 {
		return errors.New("the scenario did not reach its expected outcome")
	}
	return nil
}

// consumerURL is the DATABASE_URL a service's consumer runs with.
func (d *devEnv) consumerURL(service string) string {
	if !d.perService {
		return d.dbURL
	}
	return ServiceURL(d.dbURL, service)
}

// startConsumers starts the three consumers, each with its output followed
// (follow). When one cannot start, those started are stopped.
func (d *devEnv) startConsumers(bin string) ([]*Consumer, error) {
	var procs []*Consumer
	for _, t := range demo.Topics {
		env := append(os.Environ(),
			"KAFKA_BOOTSTRAP_SERVERS="+d.brokers,
			"DATABASE_URL="+d.consumerURL(t.Service),
			"LOG_LEVEL=info",
			"RETRY_TIME_SCALE="+d.opts.RetryTimeScale,
			"KAFKA_SESSION_TIMEOUT_MS=6000",
			"KAFKA_HEARTBEAT_INTERVAL_MS=500",
		)
		r, w := io.Pipe()
		p, err := StartConsumer(bin, t.Service, env, w)
		if err != nil {
			StopConsumers(procs...)
			return nil, err
		}
		go d.follow(p, r)
		procs = append(procs, p)
		d.say("▸ %s consumer started (pid %d): http://%s/metrics", t.Service, p.Pid(), p.Addr)
	}
	return procs, nil
}

// waitReady waits up to 60 s for every consumer's /readyz to answer 200.
func (d *devEnv) waitReady(ctx context.Context, procs []*Consumer) error {
	deadline := time.Now().Add(60 * time.Second)
	for _, p := range procs {
		for {
			select {
			case <-p.Done():
				return fmt.Errorf("%s consumer exited with code %d", p.Service, p.ExitCode())
			default:
			}
			resp, err := http.Get("http://" + p.Addr + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s consumer not ready after 60 s", p.Service)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	d.say("▸ all three consumers joined their groups\n")
	return nil
}
