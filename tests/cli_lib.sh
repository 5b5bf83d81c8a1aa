# tests/cli_lib.sh: the preamble the CLI test scripts share, sourced first:
#   . "$(dirname "$0")/cli_lib.sh" "$1"
# Sets bin (the mixprec binary given as $1, made absolute), moves into a
# fresh working directory that is removed on exit, and defines
# `fail MSG`, which reports a failure on stderr and counts it in $fails
# (each script ends with `exit $((fails > 0))`).
set -u
bin=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
