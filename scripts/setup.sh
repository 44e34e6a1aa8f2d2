#!/usr/bin/env bash
# Install and start everything Harmonics needs. Idempotent; run as root (re-runs itself
# under sudo otherwise). A second run on a ready machine only checks and takes seconds.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then exec sudo -E bash "$0" "$@"; fi
  echo "setup.sh: must run as root (and sudo is not installed)" >&2; exit 1
fi
say() { printf '[setup] %s\n' "$*"; }

# 1. system packages: command -> Debian/Ubuntu package
declare -A PKG=(
  [mnexec]=mininet [ovs-vsctl]=openvswitch-switch [iperf3]=iperf3 [tcpdump]=tcpdump
  [ping]=iputils-ping [ethtool]=ethtool [ip]=iproute2 [tc]=iproute2 [killall]=psmisc
  [chromium]=chromium    # headless, for the live view's tests (tests/test_live.py)
  [nsenter]=util-linux
)
missing=()
for cmd in "${!PKG[@]}"; do command -v "$cmd" >/dev/null 2>&1 || missing+=("${PKG[$cmd]}"); done
/usr/bin/python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  say "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" python3 >/dev/null
fi

# 2. the project's virtualenv with the pinned requirements (re-made when they change)
VENV="$ROOT/.venv"
stamp="$(sha256sum "$ROOT/requirements.txt" | cut -d' ' -f1)"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.requirements.sha256" 2>/dev/null)" != "$stamp" ]; then
  say "creating $VENV (pinned requirements)"
  rm -rf "$VENV"
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$ROOT/requirements.txt" 2>&1 \
    | { grep -v "^WARNING: Location" || true; }
  echo "$stamp" > "$VENV/.requirements.sha256"
fi

# 3. Open vSwitch: ovsdb-server and ovs-vswitchd, userspace datapath with TSO
OVS_CTL=/usr/share/openvswitch/scripts/ovs-ctl
if ! ovs-vsctl --timeout=3 show >/dev/null 2>&1; then
  say "starting ovsdb-server"
  "$OVS_CTL" --no-ovs-vswitchd --system-id=random start >/dev/null
fi
# The kernel datapath is never used (switches are datapath_type=netdev); userspace TSO
# is what makes TCP work (and fast) through netdev bridges over veth.
ovs-vsctl --no-wait set Open_vSwitch . other_config:userspace-tso-enable=true
# ovs-vswitchd sends every port's frames through one AF_PACKET socket whose buffer is
# net.core.wmem_default when the socket is made: at the kernel's 208 KB it drops frames of every
# class under load (emulation/net.py, OVS_SEND_BUFFER). Raise it first; a vswitchd whose sockets
# were made with less is restarted.
want_wmem="$(cd "$ROOT" && "$VENV/bin/python" -c 'from emulation.net import OVS_SEND_BUFFER; print(OVS_SEND_BUFFER)')"
if [ "$(sysctl -n net.core.wmem_default)" -lt "$want_wmem" ]; then
  say "raising net.core.wmem_default to $want_wmem"
  sysctl -qw net.core.wmem_default="$want_wmem"
fi
if pidof ovs-vswitchd >/dev/null 2>&1 && ! (cd "$ROOT" && "$VENV/bin/python" -c \
     'from emulation.net import check_send_buffer; check_send_buffer()' >/dev/null 2>&1); then
  say "restarting ovs-vswitchd (its send socket predates the raised buffer)"
  "$OVS_CTL" --no-ovsdb-server stop >/dev/null 2>&1 || true
fi
if ! pidof ovs-vswitchd >/dev/null 2>&1; then
  say "starting ovs-vswitchd"
  "$OVS_CTL" --no-ovsdb-server --system-id=random start >/dev/null 2>&1 || true
fi

# 4. check the result
fail() { echo "setup.sh: $*" >&2; exit 1; }
pidof ovs-vswitchd >/dev/null || fail "ovs-vswitchd is not running (see /var/log/openvswitch/ovs-vswitchd.log)"
ovs-vsctl --timeout=5 show >/dev/null || fail "ovsdb-server does not answer"
[ "$(ovs-vsctl get Open_vSwitch . other_config:userspace-tso-enable)" = '"true"' ] || fail "userspace TSO is off"
for cmd in "${!PKG[@]}"; do command -v "$cmd" >/dev/null || fail "$cmd is missing"; done
"$VENV/bin/python" -c 'import os_ken, mininet.net, scapy, numpy, yaml, pydantic' \
  || fail "the virtualenv is broken; delete $VENV and run again"
(cd "$ROOT" && "$VENV/bin/python" -c 'from emulation.net import check_send_buffer; check_send_buffer()') \
  || fail "Open vSwitch's send buffer is too small (see above)"
# the model's compiled kernel: numba caches it next to the source; compiling it here (once per
# checkout, ~11 s) keeps it out of the first controller start and the first decision
(cd "$ROOT" && "$VENV/bin/python" -c 'from scheduling.evaluate import warm_up; warm_up()') \
  || fail "the model kernel does not compile (numba); HARMONICS_NO_JIT=1 runs the Python path"
say "ready: $(ovs-vsctl --version | head -1), $("$VENV/bin/python" --version), venv $VENV"
