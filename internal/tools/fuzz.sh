#!/usr/bin/env bash
# fuzz.sh FUZZTIME PACKAGE:TARGET...: runs each fuzz target for FUZZTIME.
#
# Go 1.26's fuzz coordinator can fail a target with a bare "context deadline exceeded" at
# the end of -fuzztime when a loaded machine starves its workers (go.dev/issue/75804, fixed
# in Go 1.27); no input fails then and none is written. Such a run is tried once more. Any
# other failure, and a failing input written to testdata/fuzz, fails at once.
set -uo pipefail
fuzztime=$1; shift
for spec in "$@"; do
	pkg=${spec%%:*}; target=${spec#*:}
	for attempt in 1 2; do
		log=$(mktemp)
		"${GO:-go}" test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" 2>&1 | tee "$log"
		status=${PIPESTATUS[0]}
		if [ "$status" -eq 0 ]; then rm -f "$log"; break; fi
		if [ "$attempt" -eq 1 ] && grep -q 'context deadline exceeded' "$log" &&
			! grep -q -e 'Failing input written' -e 'panic:' -e '_test.go:[0-9]*:' "$log"; then
			echo "fuzz.sh: $target stopped on the fuzz coordinator's deadline race (go.dev/issue/75804) with no failing input; running it once more"
			rm -f "$log"; continue
		fi
		rm -f "$log"; exit "$status"
	done
done
