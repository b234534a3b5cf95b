#!/bin/sh
# ctest entry for the server e2e tests: checks that the test virtual
# environment exists, then runs one group of test_server_e2e.py with it.
#   run_e2e.sh <source dir> <api|load|browser> <server binary>
set -eu
src="$1"; group="$2"; server="$3"
py="$src/.venv/bin/python"
if [ ! -x "$py" ]; then
  echo "FAIL: $py is missing: run scripts/setup (creates .venv with scripts/requirements-test.txt)" >&2
  exit 1
fi
exec "$py" "$src/tests/server/e2e/test_server_e2e.py" --group "$group" --server "$server" --root "$src"
