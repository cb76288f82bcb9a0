// Package acceptance holds timeoutmill's end-to-end tests: the whole pipeline (publisher, store
// satellite, poller, dispatch satellite) against real brokers (RabbitMQ, Redis Streams, NATS
// JetStream; brokers_test.go holds the table every broker scenario runs over) and each durable
// store, as a user runs it. The tests need the servers `make test` starts (scripts/services.sh); without them they
// are skipped with a message saying how to run them, and under CI they fail.
//
// Every test uses endpoint and queue names of its own, with a random part, so tests run in
// parallel, re-run, and leave no queues behind. Timing bounds are generous: the tests prove that
// nothing is delivered early, lost or duplicated, not how fast; they log the figures they see.
package acceptance
