//go:build race

package acceptance

// raceEnabled: the race detector is on (go test -race).
const raceEnabled = true
