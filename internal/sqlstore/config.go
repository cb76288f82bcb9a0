package sqlstore

import (
	"errors"
	"fmt"
)

// TableName is table, or when it is empty and endpoint is not, "<endpoint>.timeouts", the
// NServiceBus name.
func TableName(endpoint, table string) string {
	if table == "" && endpoint != "" {
		return endpoint + ".timeouts"
	}
	return table
}

// CheckConfig reports what is wrong with a backend's config, as "<name>: invalid config: …":
// table (see TableName) must be set and pass checkTable, and problems are the backend's own
// findings, nil where there is none.
func CheckConfig(name, table string, checkTable func(string) error, problems ...error) error {
	var errs []error
	if table == "" {
		errs = append(errs, errors.New("Endpoint or Table must be set"))
	} else if err := checkTable(table); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(append(errs, problems...)...); err != nil {
		return fmt.Errorf("%s: invalid config: %w", name, err)
	}
	return nil
}

// CheckMaxOpenConns refuses a negative bound of a pool's connections.
func CheckMaxOpenConns(n int) error {
	if n < 0 {
		return fmt.Errorf("MaxOpenConns cannot be negative (%d)", n)
	}
	return nil
}
