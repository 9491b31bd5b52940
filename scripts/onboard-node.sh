#!/usr/bin/env bash
# Give a machine its identity as an llmgw node and start its agent. Run it where the certificate authority is.
#
#   scripts/onboard-node.sh NAME ADDRESS --control-plane https://cp1:7443[,https://cp2:7443] [options]
#
# NAME is the node id, its hostname and its certificate's CN; ADDRESS the IP it is reached at by ssh (and the
# address its certificate names). In order: issues the node's certificate from the CA; waits for ssh to answer (a
# new machine restarts sshd in its first minute); learns a new host key and refuses a changed one
# (StrictHostKeyChecking=accept-new); copies the release bundle and checks the copy; installs it with the bundle's
# install-node.sh (a virtual environment from the bundle's wheels only, agent.yaml with the control planes, the TLS
# files and the --set keys, the systemd unit); waits until the control plane has heard from the node with the new
# certificate, and prints what it says of it (`llmgw ctl nodes wait`).
#
# Options:
#   --ca DIR              the CA directory (default: /etc/llmgw/pki)
#   --bundle FILE         the release tarball (default: the newest dist/llmgw-*.tar.gz of this checkout);
#                         FILE.sha256 must be beside it (scripts/build-bundle.sh writes both)
#   --admin URL           the management API, to wait on (default: $LLMGW_ADMIN or http://127.0.0.1:9090);
#                         the operator token is read as `llmgw ctl` reads it
#   --set KEY=VALUE       a key for the node's agent.yaml (repeatable), e.g. --set weights_budget=800Gi
#   --python PATH         the node's Python 3.11 (default: python3.11 on the node's PATH)
#   --ssh-user USER       (default: root)       --ssh-port PORT   (default: 22)
#   --identity FILE       ssh key to log in with          --known-hosts FILE (default: ~/.ssh/known_hosts)
#   --wait-ssh SECONDS    how long ssh may take to answer (default: 300)
#   --wait-node SECONDS   how long the node may take to register once installed (default: 120)
# Exit status: 0 registered; 2 wrong use; 3 the node refused the bundle; 4 a step failed; 5 ssh refused the
# machine (a changed host key) or never answered.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
started=$(date +%s)
say() { printf '[%3ds] %s\n' "$(( $(date +%s) - started ))" "$*"; }
die() { code=$1; shift; printf '[%3ds] onboard-node: %s\n' "$(( $(date +%s) - started ))" "$*" >&2; exit "$code"; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }

[ $# -ge 1 ] && { [ "$1" = -h ] || [ "$1" = --help ]; } && { usage; exit 0; }
[ $# -ge 2 ] || { usage >&2; exit 2; }
name="$1"
address="$2"
shift 2
control_planes=""
ca=/etc/llmgw/pki
bundle=""
admin="${LLMGW_ADMIN:-http://127.0.0.1:9090}"
python=""
ssh_user=root
ssh_port=22
identity=""
known_hosts="$HOME/.ssh/known_hosts"
wait_ssh=300
wait_node=120
sets=()
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || die 2 "$1 needs a value (see --help)"
    case "$1" in
        --control-plane) control_planes="$2" ;;
        --ca) ca="$2" ;;
        --bundle) bundle="$2" ;;
        --admin) admin="$2" ;;
        --set) sets+=("$2") ;;
        --python) python="$2" ;;
        --ssh-user) ssh_user="$2" ;;
        --ssh-port) ssh_port="$2" ;;
        --identity) identity="$2" ;;
        --known-hosts) known_hosts="$2" ;;
        --wait-ssh) wait_ssh="$2" ;;
        --wait-node) wait_node="$2" ;;
        *) die 2 "unknown option $1 (see --help)" ;;
    esac
    shift 2
done

[[ "$name" =~ ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$ ]] \
    || die 2 "'$name' is not a hostname (lowercase letters, digits and '-', at most 63): it is the node's hostname, id and certificate CN"
[ -n "$control_planes" ] || die 2 "--control-plane is required: the https:// address(es) of the control plane's agent listener"
for url in ${control_planes//,/ }; do
    [[ "$url" =~ ^https://[^/]+$ ]] || die 2 "--control-plane $url: must be https://HOST:PORT (agents speak mutual TLS)"
done
[[ "$wait_ssh" =~ ^[0-9]+$ && "$wait_node" =~ ^[0-9]+$ ]] || die 2 "--wait-ssh and --wait-node take whole seconds"

llmgw=$(command -v llmgw || true)
[ -n "$llmgw" ] || llmgw="$here/../.venv/bin/llmgw"
[ -x "$llmgw" ] || die 2 "no llmgw here (on PATH or in $here/../.venv): onboarding needs it for the certificate and the wait"
[ -f "$ca/ca.crt" ] && [ -f "$ca/ca.key" ] || die 2 "$ca holds no CA (ca.crt and ca.key): run this where the CA is, or give --ca"

if [ -z "$bundle" ]; then
    bundle=$(ls -t "$here"/../dist/llmgw-*.tar.gz 2>/dev/null | head -1 || true)
    [ -n "$bundle" ] || die 2 "no release bundle in $here/../dist: build one (scripts/build-bundle.sh) or give --bundle"
fi
[ -f "$bundle" ] && [ -f "$bundle.sha256" ] || die 2 "$bundle and $bundle.sha256 are both needed (scripts/build-bundle.sh writes them)"
bundle_name=$(basename "$bundle")
(cd "$(dirname "$bundle")" && sha256sum --quiet -c "$bundle_name.sha256") >/dev/null 2>&1 \
    || die 2 "$bundle does not match $bundle.sha256: damaged or altered here already"

ssh_opts=(-o BatchMode=yes -o StrictHostKeyChecking=accept-new -o "UserKnownHostsFile=$known_hosts"
          -o ConnectTimeout=5 -o ServerAliveInterval=5 -o ServerAliveCountMax=3 -o LogLevel=ERROR -p "$ssh_port")
[ -z "$identity" ] || ssh_opts+=(-i "$identity" -o IdentitiesOnly=yes)
mkdir -p "$(dirname "$known_hosts")"
err=$(mktemp)
trap 'rm -f "$err"' EXIT

host_key_refused() {
    die 5 "$address did not present the host key $known_hosts holds for it: this is not the machine first seen at that address (another machine took the address, or this one was rebuilt). If it was rebuilt on purpose: ssh-keygen -f $known_hosts -R $address, then run this again. ssh said: $(tr '\n' ' ' < "$err" | cut -c1-300)"
}

# remote CMD: run CMD on the node. ssh failing to connect (status 255: sshd restarting, the machine booting) is
# retried until the ssh deadline; a changed host key never is; the command's own failure is returned.
remote_deadline=0
remote() {
    local rc
    while true; do
        rc=0
        ssh "${ssh_opts[@]}" "$ssh_user@$address" "$1" 2>"$err" || rc=$?
        if [ "$rc" -ne 255 ]; then
            cat "$err" >&2
            return "$rc"
        fi
        grep -qE 'REMOTE HOST IDENTIFICATION HAS CHANGED|Host key verification failed' "$err" && host_key_refused
        [ "$(date +%s)" -lt "$remote_deadline" ] \
            || die 5 "ssh to $ssh_user@$address:$ssh_port did not answer within ${wait_ssh}s: $(tr '\n' ' ' < "$err" | cut -c1-300)"
        say "waiting for ssh on $address:$ssh_port ($(tail -1 "$err" | tr -d '\r' | cut -c1-120))"
        sleep 1
    done
}
q() { printf '%q' "$1"; }

# 1. the node's identity
say "issuing the certificate for $name (CN and SAN $name, IP $address) from $ca"
"$llmgw" ca issue "$ca" "$name" --ip "$address" >/dev/null || die 4 "could not issue the certificate"
stage=$(mktemp -d)
trap 'rm -f "$err"; rm -rf "$stage"' EXIT
mkdir "$stage/pki"
cp "$ca/ca.crt" "$stage/pki/ca.crt"
cp "$ca/$name.crt" "$stage/pki/node.crt"
cp "$ca/$name.key" "$stage/pki/node.key"
chmod 600 "$stage/pki/node.key"

# 2. the machine answers ssh, with a host key first seen now or the one seen before
remote_deadline=$(( $(date +%s) + wait_ssh ))
say "waiting for ssh on $address:$ssh_port"
remote true
say "ssh answers; the machine calls itself $(remote hostname)"

# 3. the bundle and the certificate, copied whole (again if ssh breaks off) and checked there
incoming=/opt/llmgw/incoming
copy() {
    local rc
    while true; do
        rc=0
        tar -C "$stage" -cf - pki -C "$(cd "$(dirname "$bundle")" && pwd)" "$bundle_name" "$bundle_name.sha256" \
            | ssh "${ssh_opts[@]}" "$ssh_user@$address" \
                "umask 077 && rm -rf $incoming && mkdir -p $incoming && tar -xf - -C $incoming" 2>"$err" || rc=$?
        [ "$rc" -eq 0 ] && return 0
        grep -qE 'REMOTE HOST IDENTIFICATION HAS CHANGED|Host key verification failed' "$err" && host_key_refused
        [ "$(date +%s)" -lt "$remote_deadline" ] || die 4 "could not copy the bundle to $address: $(tr '\n' ' ' < "$err" | cut -c1-300)"
        say "waiting for ssh on $address:$ssh_port to copy again ($(tail -1 "$err" | tr -d '\r' | cut -c1-120))"
        sleep 1
    done
}
say "copying $bundle_name ($(du -h "$bundle" | cut -f1)) and the certificate"
remote_deadline=$(( $(date +%s) + wait_ssh ))
copy
remote "cd $incoming && sha256sum --quiet -c $(q "$bundle_name.sha256")" \
    || die 4 "the copy on $address does not match $bundle_name.sha256"
say "copied and checked"

# 4. installed from the bundle, agent started
args=(--control-plane "$control_planes" --node "$name" --pki "$incoming/pki")
[ -z "$python" ] || args+=(--python "$python")
for kv in "${sets[@]+"${sets[@]}"}"; do args+=(--set "$kv"); done
cmd="cd $incoming && tar -xzf $(q "$bundle_name") && ./$(q "${bundle_name%.tar.gz}")/install-node.sh"
for a in "${args[@]}"; do cmd+=" $(q "$a")"; done
say "installing on $name"
rc=0
remote "$cmd; rc=\$?; rm -rf $incoming; exit \$rc" || rc=$?
[ "$rc" -eq 0 ] || die "$rc" "the install on $name failed (above)"

# 5. the control plane has heard from it, with this certificate
say "waiting for $name to register with the control plane ($admin)"
if ! "$llmgw" ctl nodes wait "$name" --cert "$ca/$name.crt" --timeout "$wait_node" --admin "$admin"; then
    say "what the node's service manager says:"
    remote "systemctl status llmgw-agent --no-pager -n 30" || true
    die 4 "$name was installed but has not registered with the control plane"
fi
say "$name registered (onboarded in $(( $(date +%s) - started ))s)"
