package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pin-platform/pin/consumers/demo"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/internal/freeport"
	"github.com/pin-platform/pin/migrate/pgtest"
)

// tricky is in every password of these tests: the characters that break
// a URL written by hand, and those a JSON log line escapes.
const tricky = "s3%cr@t:pw\"q\\b\tt"

// leaks returns the forms of the secrets found in out: as given, URL-
// and JSON-escaped.
func leaks(out string, secrets ...string) []string {
	var found []string
	for _, s := range secrets {
		for _, f := range []string{s, url.QueryEscape(s), url.PathEscape(s), strings.TrimPrefix(url.UserPassword("u", s).String(), "u:"), "cr@t"} {
			j, _ := json.Marshal(f)
			for _, form := range []string{f, strings.Trim(string(j), `"`)} {
				if strings.Contains(out, form) {
					found = append(found, form)
				}
			}
		}
	}
	return found
}

// readyz is the body of the /readyz answer at addr.
func readyz(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatalf("/readyz: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("/readyz %d: %s", resp.StatusCode, body)
}

// freeAddr is a loopback address with a port free at the time of the call.
func freeAddr(t *testing.T) string {
	t.Helper()
	a, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// secureEnv is the environment of a process of these tests: the broker's
// address and SASL/PLAIN login (password kafkaPW), the database URL, and
// the variables Kubernetes injects for a Service named kafka, which must
// be ignored.
func secureEnv(brokers, kafkaPW, dbURL string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KAFKA_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			env = append(env, kv)
		}
	}
	return append(env,
		"KAFKA_BOOTSTRAP_SERVERS="+brokers,
		"KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT",
		"KAFKA_SASL_MECHANISM=PLAIN",
		"KAFKA_SASL_USERNAME=app",
		"KAFKA_SASL_PASSWORD="+kafkaPW,
		"KAFKA_PORT=tcp://10.96.0.10:9092",
		"KAFKA_PORT_9092_TCP=tcp://10.96.0.10:9092",
		"KAFKA_PORT_9092_TCP_ADDR=10.96.0.10",
		"KAFKA_SERVICE_HOST=10.96.0.10",
		"KAFKA_SERVICE_PORT=9092",
		"DATABASE_URL="+dbURL,
		"RETRY_TIME_SCALE=0.01",
		"KAFKA_SESSION_TIMEOUT_MS=6000",
		"KAFKA_HEARTBEAT_INTERVAL_MS=500",
	)
}

// withPassword is dbURL with user postgres and password pw, encoded as a
// URL must be (the test server trusts local connections: the password is
// not checked, only never to be printed).
func withPassword(dbURL, pw string) string {
	u, _ := url.Parse(dbURL)
	u.User = url.UserPassword("postgres", pw)
	return u.String()
}

// TestSASLReachesEveryKafkaClientAndNoSecretIsPrinted runs the consumers
// and pinctl's Kafka and database commands against a kfake cluster that
// takes SASL/PLAIN logins only, with passwords holding %, @ and :. With
// the right credentials each works; with a wrong one each ends at once
// with one clear line and a non-zero exit; no output holds a password in
// any encoding, and the Kubernetes service-link variables are ignored
// with a warning.
func TestSASLReachesEveryKafkaClientAndNoSecretIsPrinted(t *testing.T) {
	bin := builtBinaries(t)
	kafkaPW, wrongPW, dbPW := "kafka-"+tricky, "wrong-"+tricky, "db-"+tricky
	topics := map[string]int{}
	for _, tp := range demo.Topics {
		topics[tp.Name], topics[tp.DLQ] = tp.Partitions, tp.Partitions
	}
	cl := kafkatest.NewKfakeSASL(t, topics, "app", kafkaPW)
	dbURL := withPassword(pgtest.NewDB(t), dbPW)
	secrets := []string{kafkaPW, wrongPW, dbPW}
	check := func(t *testing.T, what, out string) {
		t.Helper()
		if l := leaks(out, secrets...); len(l) > 0 {
			t.Errorf("%s prints a secret (%q):\n%s", what, l, out)
		}
	}

	for _, tp := range demo.Topics {
		t.Run(tp.Service+" consumer, right credentials", func(t *testing.T) {
			cl.Produce(t, tp.Name, kafkatest.Message{Partition: 0, Key: []byte("k"), Value: []byte("not json")})
			cmd := exec.Command(filepath.Join(bin, tp.Service+"-consumers"))
			addr := freeAddr(t)
			cmd.Env = append(secureEnv(cl.Bootstrap, kafkaPW, dbURL), "HTTP_ADDR="+addr)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			kafkatest.Eventually(t, 60*time.Second, func() bool {
				select {
				case err := <-done:
					t.Fatalf("the consumer ended (%v):\n%s", err, out.String())
				default:
				}
				return cl.Count(t, tp.DLQ) >= 1 && cl.Committed(t, tp.Group, tp.Name)[0] >= 1
			}, "the message dead-lettered (over SASL) and its offset committed")
			ready := readyz(t, addr)
			_ = cmd.Process.Signal(syscall.SIGTERM)
			if err := <-done; err != nil {
				t.Fatalf("exit after SIGTERM: %v\n%s", err, out.String())
			}
			check(t, "the consumer", out.String())
			check(t, "the consumer's /readyz", ready)
			if n := strings.Count(out.String(), "ignoring KAFKA_PORT, KAFKA_PORT_9092_TCP, KAFKA_PORT_9092_TCP_ADDR, KAFKA_SERVICE_HOST, KAFKA_SERVICE_PORT"); n != 1 {
				t.Errorf("%d warnings about the service-link variables, want 1:\n%s", n, out.String())
			}
		})
	}

	t.Run("a consumer with a wrong password", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "rewards-consumers"))
		cmd.Env = append(secureEnv(cl.Bootstrap, wrongPW, dbURL), "HTTP_ADDR=127.0.0.1:0")
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("still running after 90 s: a refused login must end the process\n%s", out)
		}
		if code := exitCodeOf(err); code != 1 {
			t.Fatalf("exit %d, want 1:\n%s", code, out)
		}
		if n := strings.Count(string(out), "SASL authentication failed"); n != 1 {
			t.Fatalf("%d lines say the login was refused, want 1:\n%s", n, out)
		}
		check(t, "the consumer", string(out))
	})

	t.Run("a DATABASE_URL whose password is not encoded", func(t *testing.T) {
		raw := strings.Replace(dbURL, url.UserPassword("postgres", dbPW).String(), "postgres:"+dbPW, 1)
		cmd := exec.Command(filepath.Join(bin, "crm-consumers"))
		cmd.Env = secureEnv(cl.Bootstrap, kafkaPW, raw)
		out, err := cmd.CombinedOutput()
		if code := exitCodeOf(err); code != 2 || !strings.Contains(string(out), "DATABASE_URL") {
			t.Fatalf("exit %d, want 2 and a line naming DATABASE_URL:\n%s", code, out)
		}
		check(t, "the consumer", string(out))
	})

	urlFile := filepath.Join(t.TempDir(), "url")
	if err := os.WriteFile(urlFile, []byte(dbURL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rewards := demo.Topics[1]
	pinctl := []struct {
		name string
		args []string
		env  string // the database URL of the environment
	}{
		{"dlq list", []string{"dlq", "list", "--topic", rewards.DLQ}, ""},
		{"dlq replay", []string{"dlq", "replay", "--topic", rewards.DLQ, "--yes"}, ""},
		{"group reset", []string{"group", "reset", "--group", rewards.Group, "--topic", rewards.Name, "--to-earliest", "--yes"}, ""},
		{"migrate status --url", []string{"migrate", "status", "--url", dbURL, "--drift=false"}, ""},
		{"migrate status --url-file", []string{"migrate", "status", "--url-file", urlFile, "--drift=false"}, ""},
		{"migrate apply from $DATABASE_URL", []string{"migrate", "apply"}, dbURL},
		{"migrate plan", []string{"migrate", "plan", "--url", dbURL, "--dev-url", withPassword(pgtest.NewEmptyDB(t), dbPW)}, ""},
	}
	for _, c := range pinctl {
		t.Run("pinctl "+c.name, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(bin, "pinctl"), c.args...)
			cmd.Env = secureEnv(cl.Bootstrap, kafkaPW, c.env)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v:\n%s", err, out)
			}
			check(t, "pinctl "+c.name, string(out))
		})
	}
	for _, c := range pinctl[:3] {
		t.Run("pinctl "+c.name+" with a wrong password", func(t *testing.T) {
			cmd := exec.Command(filepath.Join(bin, "pinctl"), c.args...)
			cmd.Env = secureEnv(cl.Bootstrap, wrongPW, "")
			out, err := cmd.CombinedOutput()
			if code := exitCodeOf(err); code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, out)
			}
			if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "SASL authentication failed") {
				t.Fatalf("want one line saying the login was refused:\n%s", out)
			}
			check(t, "pinctl "+c.name, string(out))
		})
	}
	for _, u := range []string{
		strings.Replace(dbURL, url.UserPassword("postgres", dbPW).String(), "postgres:"+dbPW, 1), // not encoded: does not parse
		"postgres://postgres:" + url.PathEscape(dbPW) + "@127.0.0.1:1/none?sslmode=disable",      // unreachable
		"host=127.0.0.1 port=1 user=postgres password='" + dbPW + "' dbname=none",                // key=value
	} {
		t.Run("pinctl migrate status of a bad URL", func(t *testing.T) {
			cmd := exec.Command(filepath.Join(bin, "pinctl"), "migrate", "status", "--url", u)
			cmd.Env = secureEnv(cl.Bootstrap, kafkaPW, "")
			out, err := cmd.CombinedOutput()
			if code := exitCodeOf(err); code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, out)
			}
			check(t, "pinctl migrate status", string(out))
		})
	}
}

func exitCodeOf(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if e, ok := err.(*exec.ExitError); ok {
		ee = e
		return ee.ExitCode()
	}
	return -1
}
