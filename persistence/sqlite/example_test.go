package sqlite_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/timeoutmill/timeoutmill/persistence"
	"github.com/timeoutmill/timeoutmill/persistence/sqlite"
)

// Example walks one timeout through the life the satellites give it: stored (twice, as a
// redelivered message would be), claimed when due, looked up, forwarded and removed.
func Example() {
	dir, err := os.MkdirTemp("", "timeoutmill-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ctx := context.Background()
	store, err := sqlite.Open(ctx, sqlite.Config{
		Path:     filepath.Join(dir, "timeouts.db"),
		Endpoint: "orders",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	due := time.Date(2030, 1, 2, 15, 4, 5, 123456000, time.UTC)
	reminder := persistence.Timeout{
		ID:          "0b6f6bb2-4c1e-4d5c-9a57-1c8f0f6f1a2b",
		Destination: "billing.reminders",
		Due:         due,
		Payload:     []byte(`{"invoice":42}`),
		Metadata:    map[string]string{"correlation_id": "order-42"},
	}
	for range 2 {
		inserted, err := store.Store(ctx, reminder)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("inserted:", inserted)
	}

	next, _, err := store.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("next due:", next.Format(time.RFC3339Nano))

	early, err := store.ClaimDue(ctx, due.Add(-time.Second), 100, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	ids, err := store.ClaimDue(ctx, due, 100, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("claimed a second early:", len(early), "when due:", len(ids))

	timeout, err := store.Peek(ctx, ids[0])
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("forward %s to %s\n", timeout.Payload, timeout.Destination)

	removed, err := store.Remove(ctx, ids[0])
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("removed:", removed)
	// Output:
	// inserted: true
	// inserted: false
	// next due: 2030-01-02T15:04:05.123456Z
	// claimed a second early: 0 when due: 1
	// forward {"invoice":42} to billing.reminders
	// removed: true
}
