#!/bin/sh
# ctest entry for the `cellm chat` e2e test: checks that the test virtual
# environment exists, then runs tests/cli/chat_e2e.py with it.
#   run_chat_e2e.sh <source dir> <cellm binary>
set -eu
src="$1"; cellm="$2"
py="$src/.venv/bin/python"
if [ ! -x "$py" ]; then
  echo "FAIL: $py is missing: run scripts/setup (creates .venv with scripts/requirements-test.txt)" >&2
  exit 1
fi
exec "$py" "$src/tests/cli/chat_e2e.py" --cellm "$cellm" --root "$src"
