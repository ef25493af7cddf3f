package migrate

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"runtime/debug"
	"strings"
	"time"

	_ "ariga.io/atlas/sql/postgres" // atlas driver "postgres" for sqlclient.Open
	"ariga.io/atlas/sql/sqlclient"
	_ "github.com/lib/pq" // database/sql driver "postgres" used by the atlas driver

	"github.com/pin-platform/pin/internal/secret"
)

// DefaultConnectTimeout bounds how long opening a connection may take when
// the URL does not say (connect_timeout): an unreachable database is
// reported within seconds rather than after the TCP default.
const DefaultConnectTimeout = 5 * time.Second

// ConnError reports that a database could not be reached: refused or timed
// out connection, unknown host, authentication failure, missing database.
type ConnError struct {
	URL string // the URL without its password
	Err error
}

func (e *ConnError) Error() string {
	return fmt.Sprintf("cannot reach database %s: %v", e.URL, e.Err)
}

func (e *ConnError) Unwrap() error { return e.Err }

// open connects an atlas client to rawURL, adding a connect timeout unless
// the URL sets one.
func open(ctx context.Context, rawURL string) (*sqlclient.Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" {
		return nil, fmt.Errorf("invalid database URL %q: want postgres://user@host:port/db?sslmode=disable", Redact(rawURL))
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return nil, fmt.Errorf("invalid database URL %s: only postgres:// is supported", Redact(rawURL))
	}
	q := u.Query()
	if q.Get("connect_timeout") == "" {
		q.Set("connect_timeout", fmt.Sprint(int(DefaultConnectTimeout.Seconds())))
		u.RawQuery = q.Encode()
	}
	c, err := sqlclient.OpenURL(ctx, u)
	if err != nil {
		// The atlas driver prefixes the first query's error; keep the cause.
		for strings.HasPrefix(err.Error(), "postgres: ") && errors.Unwrap(err) != nil {
			err = errors.Unwrap(err)
		}
		return nil, &ConnError{URL: Redact(rawURL), Err: err}
	}
	return c, nil
}

// Redact returns rawURL (a URL or a key=value string) with its password
// masked, whether or not it parses: for messages.
func Redact(rawURL string) string { return secret.DSN(rawURL) }

// OperatorVersion is what Apply records in the revisions' operator_version
// column: this tool and the atlas library it is built on.
func OperatorVersion() string {
	v := "pinctl"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "ariga.io/atlas" {
				return v + " (ariga.io/atlas " + d.Version + ")"
			}
		}
	}
	return v
}
