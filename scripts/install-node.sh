#!/usr/bin/env bash
# Install this release bundle on a node and start its agent (run as root, from the unpacked bundle; onboarding
# runs it for you: scripts/onboard-node.sh).
#
#   ./install-node.sh --control-plane https://cp1:7443[,https://cp2:7443] --node NAME \
#       [--pki DIR] [--python PATH] [--set KEY=VALUE]...
#
# --pki DIR     ca.crt and the node's certificate and key (node.crt and node.key, or NAME.crt and NAME.key as
#               `llmgw ca issue` names them), installed into /etc/llmgw/pki (default: the ones already there)
# --python      the CPython this bundle's wheels are for (default: python3.11, else python3 if it is that version)
# --set         a key of agent.yaml (its value read as YAML: --set weights_budget=800Gi --set peer_port=0)
#
# What it does, each step whole or not at all: checks that the machine's hostname is NAME; installs the release
# (install-release.sh: checked against SHA256SUMS, from the bundle's wheels only, into /opt/llmgw/.venv); writes
# /etc/llmgw/agent.yaml (the control-plane addresses, the TLS files and the keys given, checked by the new llmgw
# before it replaces the old file); installs the systemd unit and starts the agent, or hands a running one over to
# the new release (SIGUSR2: its engines keep serving and are adopted). Exit status: 0 done, 2 wrong use, 3 this machine cannot take the bundle, 4 a step failed.
set -euo pipefail

say() { printf 'install-node: %s\n' "$*"; }
die() { code=$1; shift; printf 'install-node: %s\n' "$*" >&2; exit "$code"; }

here=$(cd "$(dirname "$0")" && pwd)
control_planes=""
node=""
pki=""
python=""
sets=()
while [ $# -gt 0 ]; do
    case "$1" in
        --control-plane) control_planes="$2"; shift 2 ;;
        --node) node="$2"; shift 2 ;;
        --pki) pki="$2"; shift 2 ;;
        --python) python="$2"; shift 2 ;;
        --set) sets+=("$2"); shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) die 2 "unknown argument $1 (see --help)" ;;
    esac
done
[ -n "$control_planes" ] || die 2 "--control-plane is required: the https:// addresses of the control plane's agent listener"
[ -n "$node" ] || die 2 "--node is required: the node id this machine is installed as (its hostname)"
[ "$(id -u)" = 0 ] || die 2 "run as root: it installs under /opt/llmgw and /etc/llmgw and starts a systemd unit"

# 1. the machine is the node it is installed as
have_id=""
for kv in "${sets[@]+"${sets[@]}"}"; do
    case "$kv" in node_id=*) have_id="${kv#node_id=}" ;; esac
done
host=$(hostname)
host=${host%%.*}
if [ -z "$have_id" ] && [ "$host" != "$node" ]; then
    die 3 "this machine's hostname is '$host', but it is being installed as node '$node': a node's id is its hostname and must equal its certificate's CN. Set the hostname (hostnamectl set-hostname $node), or give --set node_id=$node"
fi

# 2. the release: checked, installed whole, made current (install-release.sh)
python_args=()
[ -z "$python" ] || python_args=(--python "$python")
"$here/install-release.sh" "${python_args[@]+"${python_args[@]}"}" || exit $?
llmgw=/opt/llmgw/.venv/bin/llmgw
version=$(sed -n 's/^version=//p' "$here/RELEASE")

# 3. certificates and agent.yaml
umask 077
mkdir -p /etc/llmgw/pki
if [ -n "$pki" ]; then
    for f in ca.crt node.crt node.key; do
        from="$pki/$f"
        [ -s "$from" ] || [ "$f" = ca.crt ] || from="$pki/$node.${f#node.}"
        [ -s "$from" ] || die 2 "--pki $pki has no $f (nor $node.${f#node.})"
        install -m 0600 "$from" "/etc/llmgw/pki/$f.new"
    done
    for f in ca.crt node.crt node.key; do mv -f "/etc/llmgw/pki/$f.new" "/etc/llmgw/pki/$f"; done
fi
for f in ca.crt node.crt node.key; do
    [ -s "/etc/llmgw/pki/$f" ] || die 2 "/etc/llmgw/pki/$f is missing: give --pki (onboard-node.sh does)"
done
/opt/llmgw/.venv/bin/python - "$control_planes" "${sets[@]+"${sets[@]}"}" > /etc/llmgw/agent.yaml.new <<'EOF'
import sys
import yaml
cfg = {
    "control_planes": [u.strip() for u in sys.argv[1].split(",") if u.strip()],
    "tls": {"ca": "/etc/llmgw/pki/ca.crt", "cert": "/etc/llmgw/pki/node.crt", "key": "/etc/llmgw/pki/node.key"},
}
for kv in sys.argv[2:]:
    key, sep, value = kv.partition("=")
    if not sep or not key:
        sys.exit(f"--set {kv!r}: must be KEY=VALUE")
    cfg[key] = yaml.safe_load(value)
print("# Written by install-node.sh: the control planes, the TLS files and the keys given; the rest is discovered.")
print(yaml.safe_dump(cfg, sort_keys=False), end="")
EOF
if ! why=$("$llmgw" agent --check -c /etc/llmgw/agent.yaml.new 2>&1); then
    rm -f /etc/llmgw/agent.yaml.new
    die 2 "agent.yaml would be refused, so the old one is kept: $why"
fi
mv -f /etc/llmgw/agent.yaml.new /etc/llmgw/agent.yaml
umask 022

# 4. the unit, and the agent running this release
install -m 0644 "$here/llmgw-agent.service" /etc/systemd/system/llmgw-agent.service.new
mv -f /etc/systemd/system/llmgw-agent.service.new /etc/systemd/system/llmgw-agent.service
systemctl daemon-reload
systemctl enable llmgw-agent >/dev/null 2>&1 || systemctl enable llmgw-agent
if systemctl is-active --quiet llmgw-agent; then
    systemctl kill -s SIGUSR2 llmgw-agent  # it exits leaving its engines; systemd starts this release, which adopts them
    say "handed the running agent over to llmgw $version"
else
    systemctl start llmgw-agent || die 4 "systemctl start llmgw-agent failed: see systemctl status llmgw-agent"
    say "started the agent (llmgw $version)"
fi
