package postgres_test

import (
	"fmt"
	"strings"

	"github.com/timeoutmill/timeoutmill/persistence/postgres"
)

// ExampleConfig_Validate shows which names a store accepts. Quotes and semicolons are fine: names
// are always quoted. A name PostgreSQL would silently cut is refused.
func ExampleConfig_Validate() {
	for _, config := range []postgres.Config{
		{Endpoint: "orders"},
		{Endpoint: `it's "orders"; DROP TABLE users; --`},
		{Endpoint: strings.Repeat("x", 60)},
	} {
		fmt.Println(config.Validate())
	}
	// Output:
	// <nil>
	// <nil>
	// postgres: invalid config: Table "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.timeouts" is longer than 63 bytes, PostgreSQL's limit for a name (with the default Table, Endpoint may have at most 54)
}
