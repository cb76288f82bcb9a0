//go:build race

package stopcycles

// raceEnabled: the race detector slows the store and the Pub/Sub several times over.
const raceEnabled = true
