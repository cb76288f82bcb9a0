//go:build race

package amqptransport_test

// raceEnabled: the race detector is on (go test -race).
const raceEnabled = true
