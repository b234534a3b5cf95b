#!/bin/sh
# ctest entry for the server e2e tests: checks that the test virtual
# environment exists, then runs one group of one e2e script with it.
#   run_e2e.sh <source dir> <script in tests/server/e2e> <group> <server binary>
set -eu
src="$1"; script="$2"; group="$3"; server="$4"
py="$src/.venv/bin/python"
if [ ! -x "$py" ]; then
  echo "FAIL: $py is missing: run scripts/setup (creates .venv with scripts/requirements-test.txt)" >&2
  exit 1
fi
exec "$py" "$src/tests/server/e2e/$script" --group "$group" --server "$server" --root "$src"
