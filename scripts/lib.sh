# Shared by the scripts: become root (sudo when present), make sure the stack is set up.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
as_root() {
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then exec sudo -E bash "$0" "$@"; fi
    echo "$(basename "$0"): must run as root (and sudo is not installed)" >&2; exit 1
  fi
}
PY="$ROOT/.venv/bin/python"
