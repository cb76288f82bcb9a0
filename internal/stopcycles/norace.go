//go:build !race

package stopcycles

const raceEnabled = false
