// Package uuidarray provides UUIDs, a []uuid.UUID that reads and writes a
// PostgreSQL uuid[] column.
package uuidarray

import (
	"database/sql/driver"
	"fmt"

	"github.com/google/uuid"
	"github.com/lib/pq"
)

// UUIDs is a PostgreSQL uuid[] value. A nil slice is written as an empty
// array, never as NULL.
type UUIDs []uuid.UUID

// Value implements driver.Valuer.
func (u UUIDs) Value() (driver.Value, error) {
	s := make(pq.StringArray, len(u))
	for i, id := range u {
		s[i] = id.String()
	}
	return s.Value()
}

// Scan implements sql.Scanner.
func (u *UUIDs) Scan(src any) error {
	var s pq.StringArray
	if err := s.Scan(src); err != nil {
		return fmt.Errorf("uuidarray: %w", err)
	}
	out := make(UUIDs, len(s))
	for i, v := range s {
		id, err := uuid.Parse(v)
		if err != nil {
			return fmt.Errorf("uuidarray: element %d: %w", i, err)
		}
		out[i] = id
	}
	*u = out
	return nil
}
