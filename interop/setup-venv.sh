#!/usr/bin/env bash
# Creates interop/.venv with the pinned packages of interop/requirements.txt (kazoo, pytest)
# from PyPI. Idempotent: when the venv exists and was built from the current
# requirements.txt it does nothing, so repeated CI runs cost nothing.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"

if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null || true)" = "$want" ]; then
  exit 0
fi

python="${PYTHON:-python3}"
if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "setup-venv: $python cannot create a venv (on Debian: apt-get install python3-venv)" >&2
  exit 1
fi

echo "setup-venv: creating $venv from requirements.txt"
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/pip" install --disable-pip-version-check --quiet -r "$here/requirements.txt"
echo "$want" >"$stamp"
