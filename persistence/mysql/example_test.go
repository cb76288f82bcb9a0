package mysql_test

import (
	"fmt"

	"github.com/timeoutmill/timeoutmill/persistence/mysql"
)

// ExampleConfig_Validate shows which names a store accepts. Quotes, backticks and semicolons are
// fine: names are always quoted. A name MariaDB cannot hold is refused with the reason.
func ExampleConfig_Validate() {
	for _, config := range []mysql.Config{
		{Endpoint: "orders"},
		{Endpoint: "it's `orders`; DROP TABLE users; --"},
		{Endpoint: "rocket-🚀"},
	} {
		fmt.Println(config.Validate())
	}
	// Output:
	// <nil>
	// <nil>
	// mysql: invalid config: Table "rocket-🚀.timeouts" has a character outside the Basic Multilingual Plane (an emoji?), which MariaDB names cannot hold
}
