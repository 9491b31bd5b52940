#!/usr/bin/env bash
# Install this release bundle on a node and start its agent (run as root, from the unpacked bundle; onboarding
# runs it for you: scripts/onboard-node.sh).
#
#   ./install-node.sh --control-plane https://cp1:7443[,https://cp2:7443] --node NAME \
#       [--pki DIR] [--python PATH] [--set KEY=VALUE]...
#
# --pki DIR     ca.crt and the node's certificate and key (node.crt and node.key, or NAME.crt and NAME.key as
#               `llmgw ca issue` names them), installed as /etc/llmgw/tls (default: keep the ones installed)
# --python      the CPython this bundle's wheels are for (default: python3.11, else python3 if it is that version)
# --set         a key of agent.yaml (its value read as YAML: --set weights_budget=800Gi --set peer_port=0)
#
# Everything is prepared and checked before anything in use changes: the machine's hostname is NAME (or its
# short name is, and node_id is then pinned to NAME); the release is installed beside the others
# (install-release.sh: checked against SHA256SUMS, from the bundle's wheels only); the new agent.yaml (the
# control-plane addresses, the TLS files and the keys given) passes the new llmgw's `agent --check`; the
# certificates are staged in a directory of their own. Then, each by one rename: /opt/llmgw/.venv, /etc/llmgw/tls
# (a link to the staged directory: certificate and key change together), /etc/llmgw/agent.yaml. Last the systemd
# unit: the agent is started, or a running one is handed over to the new release (SIGUSR2 to the agent alone: its
# engines keep serving and are adopted). Exit status: 0 done, 2 wrong use, 3 this machine cannot take the bundle,
# 4 a step failed.
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
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    esac
    [ $# -ge 2 ] || die 2 "$1 needs a value (see --help)"
    case "$1" in
        --control-plane) control_planes="$2" ;;
        --node) node="$2" ;;
        --pki) pki="$2" ;;
        --python) python="$2" ;;
        --set) [[ "$2" =~ ^[a-z_]+= ]] || die 2 "--set $2: must be KEY=VALUE, KEY a key of agent.yaml"
               sets+=("$2") ;;
        *) die 2 "unknown argument $1 (see --help)" ;;
    esac
    shift 2
done
[ -n "$control_planes" ] || die 2 "--control-plane is required: the https:// addresses of the control plane's agent listener"
[ -n "$node" ] || die 2 "--node is required: the node id this machine is installed as (its hostname)"
[ "$(id -u)" = 0 ] || die 2 "run as root: it installs under /opt/llmgw and /etc/llmgw and starts a systemd unit"
trap 'die 4 "a step failed (line $LINENO: $BASH_COMMAND)"' ERR

# 1. the machine is the node it is installed as (the agent's id is its hostname, which must be the CN)
for kv in "${sets[@]+"${sets[@]}"}"; do
    case "$kv" in
        node_id=*) [ "${kv#node_id=}" = "$node" ] \
            || die 2 "--set $kv: a node's id must be its certificate's CN, '$node' (--node)" ;;
    esac
done
host=$(hostname | tr -cd 'A-Za-z0-9._-')
if [ "$host" != "$node" ]; then
    if [ "${host%%.*}" = "$node" ]; then
        say "this machine's hostname is $host: node_id is pinned to $node in agent.yaml"
        sets+=("node_id=$node")
    else
        pinned=""
        for kv in "${sets[@]+"${sets[@]}"}"; do [ "$kv" != "node_id=$node" ] || pinned=1; done
        [ -n "$pinned" ] || die 3 "this machine's hostname is '$host', but it is being installed as node '$node': a node's id is its hostname and must equal its certificate's CN. Set the hostname (hostnamectl set-hostname $node), or give --set node_id=$node"
    fi
fi

# 2. the release, installed beside the others, not yet current
mkdir -p /opt/llmgw
exec 9>>/opt/llmgw/.install.lock  # one install at a time: a second onboarding of the node waits for the first
flock -w 900 9 || die 4 "another install has held /opt/llmgw/.install.lock for 15 minutes"
export LLMGW_INSTALL_LOCKED=1
python_args=()
[ -z "$python" ] || python_args=(--python "$python")
rc=0
target=$("$here/install-release.sh" --prepare "${python_args[@]+"${python_args[@]}"}" | tail -1) || rc=$?
[ "$rc" -eq 0 ] || exit "$rc"
version=$(sed -n 's/^version=//p' "$here/RELEASE")

# 3. the new agent.yaml and certificates, prepared and checked by the new llmgw; nothing in use changed yet
umask 077
mkdir -p /etc/llmgw/tls.d
stamp=$(date +%Y%m%d%H%M%S)-$$
staged=""
cleanup() { rm -f /etc/llmgw/agent.yaml.new; [ -z "$staged" ] || rm -rf "$staged"; }
trap cleanup EXIT
if [ -n "$pki" ]; then
    staged="/etc/llmgw/tls.d/$stamp"
    mkdir "$staged"
    for f in ca.crt node.crt node.key; do
        from="$pki/$f"
        [ -s "$from" ] || [ "$f" = ca.crt ] || from="$pki/$node.${f#node.}"
        [ -s "$from" ] || die 2 "--pki $pki has no $f (nor $node.${f#node.})"
        install -m 0600 "$from" "$staged/$f"
    done
else
    for f in ca.crt node.crt node.key; do
        [ -s "/etc/llmgw/tls/$f" ] || die 2 "/etc/llmgw/tls/$f is missing: give --pki (onboard-node.sh does)"
    done
fi
if ! why=$("$target/bin/python" - "$control_planes" "${sets[@]+"${sets[@]}"}" 2>&1 > /etc/llmgw/agent.yaml.new <<'PY'
import sys
import yaml
cfg = {
    "control_planes": [u.strip() for u in sys.argv[1].split(",") if u.strip()],
    "tls": {"ca": "/etc/llmgw/tls/ca.crt", "cert": "/etc/llmgw/tls/node.crt", "key": "/etc/llmgw/tls/node.key"},
}
for kv in sys.argv[2:]:
    key, _, value = kv.partition("=")
    try:
        cfg[key] = yaml.safe_load(value)
    except yaml.YAMLError as e:
        sys.exit(f"--set {kv}: the value is not YAML ({str(e).splitlines()[0]})")
print("# Written by install-node.sh: the control planes, the TLS files and the keys given; the rest is discovered.")
print(yaml.safe_dump(cfg, sort_keys=False), end="")
PY
); then
    die 2 "$why"
fi
if ! why=$("$target/bin/llmgw" agent --check -c /etc/llmgw/agent.yaml.new 2>&1); then
    die 2 "agent.yaml would be refused, so nothing was changed: $why"
fi

# 4. made current, each by one rename
"$here/install-release.sh" --switch "$target"
if [ -n "$staged" ]; then
    ln -sfn "tls.d/$stamp" /etc/llmgw/tls.new
    mv -Tf /etc/llmgw/tls.new /etc/llmgw/tls
    staged=""
    for old in /etc/llmgw/tls.d/*; do  # earlier certificates: the node needs only the current one
        [ "$old" = "/etc/llmgw/tls.d/$stamp" ] || rm -rf "$old"
    done
fi
mv -f /etc/llmgw/agent.yaml.new /etc/llmgw/agent.yaml
umask 022

# 5. the unit, and the agent running this release (systemctl without the install lock's descriptor: nothing it
# starts may hold the lock)
install -m 0644 "$here/llmgw-agent.service" /etc/systemd/system/llmgw-agent.service.new
mv -f /etc/systemd/system/llmgw-agent.service.new /etc/systemd/system/llmgw-agent.service
systemctl daemon-reload 9>&- || die 4 "systemctl daemon-reload failed"
systemctl enable llmgw-agent >/dev/null 2>&1 9>&- || die 4 "systemctl enable llmgw-agent failed"
if systemctl is-active --quiet llmgw-agent 9>&-; then
    # the agent alone (systemctl kill signals the whole control group by default, and the engines are in it): it
    # exits leaving its engines; systemd starts this release (Restart=always), which adopts them
    systemctl kill --kill-who=main -s SIGUSR2 llmgw-agent 9>&- || die 4 "could not hand the running agent over"
    say "handed the running agent over to llmgw $version"
else
    systemctl start llmgw-agent 9>&- || die 4 "systemctl start llmgw-agent failed: see systemctl status llmgw-agent"
    say "started the agent (llmgw $version)"
fi
