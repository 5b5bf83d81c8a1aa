#!/usr/bin/env bash
# tests/test_readme_tour.sh: every command of README.md's CLI tour, as
# written, in sequence in one directory (tests/readme_tour.py says which
# lines it skips and why). usage: bash test_readme_tour.sh <mixprec> <source dir>
# Exit 77 (skipped) without Debian's /usr/bin/python3 (NumPy makes the
# user's data files the tour names).
[ -x /usr/bin/python3 ] || { echo "no /usr/bin/python3: skipping"; exit 77; }
exec /usr/bin/python3 "$2/tests/readme_tour.py" "$1" "$2"
