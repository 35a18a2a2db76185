#!/usr/bin/env bash
# Re-resolve constraints.txt: the newest versions pyproject.toml's ranges allow, runtime and dev, frozen from a
# throwaway venv. Run after changing a dependency range, then run the tests (make test) before committing it.
set -euo pipefail
cd "$(dirname "$0")/.."
python=$(bash scripts/python.sh)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$python" -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install --quiet '.[dev]'
{
  echo "# The versions gpuscale is tested with: runtime and dev dependencies and everything they pull in."
  echo "# Used by \`make\` (pip install -c constraints.txt -e '.[dev]') and by tests/test_install.py; pyproject.toml keeps"
  echo "# compatible ranges. Regenerate after changing a dependency: bash scripts/constraints.sh (docs/decisions.md)."
  "$tmp/venv/bin/pip" freeze --exclude gpuscale
} > constraints.txt
echo "constraints.txt: $(grep -vc '^#' constraints.txt) pins"
