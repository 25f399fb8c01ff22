//go:build unix && race

package testenv

// raceEnabled says whether this test binary was built with -race.
const raceEnabled = true
