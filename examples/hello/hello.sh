#!/bin/sh
# Prints a few lines on stdout and stderr, leaves a file in /build, and reports
# results in the course programs' format so the leaderboard has something to show.
n=${1:-3}
i=1
while [ "$i" -le "$n" ]; do
  echo "step $i of $n"
  echo "note $i on stderr" >&2
  sleep 0.1  # a moment between steps, as real work takes: lines show up as they are printed
  i=$((i + 1))
done
echo "hello from rai" > result.txt
echo "Op Time: 0.000125"
echo "Correctness: 1.0 Model: hello"
