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
[[ "$wait_ssh" =~ ^[0-9]+$ && "$wait_node" =~ ^[0-9]+$ ]] || die 2 "--wait-ssh and --wait-node take whole seconds"
# every value is checked before it reaches ssh or the node: one that ssh would read as an option of its own
# (--ssh-user -oProxyCommand=...) runs a command here, one with a newline writes another key into agent.yaml
wrong() { die 2 "$1 $(printf '%q' "$2"): $3"; }
plain() { [ -n "$1" ] && [[ "$1" != -* && ! "$1" =~ [[:space:][:cntrl:]] ]]; }  # no option, no blank, no control
for url in ${control_planes//,/ }; do
    [[ "$url" =~ ^https://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}$ ]] \
        || wrong --control-plane "$url" "must be https://HOST:PORT"
done
[[ "$admin" =~ ^https?://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?/?$ ]] \
    || wrong --admin "$admin" "must be http(s)://HOST[:PORT] (the management API)"
[[ "$ssh_user" =~ ^[A-Za-z_][A-Za-z0-9_.-]{0,31}$ ]] \
    || wrong --ssh-user "$ssh_user" "a user name: letters, digits, '_', '.' and '-', not starting with '-'"
[[ "$ssh_port" =~ ^[0-9]{1,5}$ ]] && [ "$ssh_port" -ge 1 ] && [ "$ssh_port" -le 65535 ] \
    || wrong --ssh-port "$ssh_port" "a port, 1-65535"
[ -z "$identity" ] || { plain "$identity" && [ -f "$identity" ] && [ -r "$identity" ]; } \
    || wrong --identity "$identity" "not a readable key file (or a name with a blank, or starting with '-')"
plain "$known_hosts" || wrong --known-hosts "$known_hosts" "a file name without blanks, not starting with '-'"
[ -z "$python" ] || [[ "$python" =~ ^[A-Za-z0-9_./+][A-Za-z0-9_./+-]*$ ]] \
    || wrong --python "$python" "a path or command name, not a command line"
for kv in "${sets[@]+"${sets[@]}"}"; do
    [[ "$kv" =~ ^[a-z_][a-z0-9_]*= && ! "$kv" =~ [[:cntrl:]] ]] \
        || wrong --set "$kv" "must be KEY=VALUE on one line, KEY a key of agent.yaml"
done

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

[[ "$address" =~ ^([0-9]{1,3}\.){3}[0-9]{1,3}$ || "$address" =~ ^[0-9A-Fa-f:]*:[0-9A-Fa-f:.]*$ ]] \
    || die 2 "'$address' is not an IP address: the certificate names the address the node is reached at"
host_entry="$address"
[ "$ssh_port" = 22 ] || host_entry="'[$address]:$ssh_port'"  # how known_hosts records a host on another port

ssh_opts=(-o BatchMode=yes -o StrictHostKeyChecking=accept-new -o "UserKnownHostsFile=$known_hosts"
          -o ConnectTimeout=5 -o ServerAliveInterval=5 -o ServerAliveCountMax=3 -o LogLevel=ERROR -p "$ssh_port"
          -l "$ssh_user")
[ -z "$identity" ] || ssh_opts+=(-i "$identity" -o IdentitiesOnly=yes)
mkdir -p "$(dirname "$known_hosts")"
err=$(mktemp)
stage=""
copied=""  # set once the node's key may be on the machine: removed from there however this ends
issued=""  # set once the CA has issued for this node: on a failure, taken back (the key always)
installed=""  # set once the node runs with the new certificate: the CA's copy of it then stays
incoming=/opt/llmgw/incoming
finish() {
    local rc=$?
    if [ -n "$issued" ] && [ "$rc" -ne 0 ]; then
        rm -f "$ca/$name.key"
        if [ -n "$installed" ]; then :
        elif [ -f "$stage/previous.crt" ]; then mv -f "$stage/previous.crt" "$ca/$name.crt"
        else rm -f "$ca/$name.crt"; fi
        printf 'onboard-node: the key issued for %s is removed from %s%s\n' "$name" "$ca" \
            "$([ -n "$installed" ] || echo ', and its certificate taken back')" >&2
    fi
    if [ -n "$copied" ]; then
        ssh -n "${ssh_opts[@]}" -- "$address" "rm -rf $incoming" >/dev/null 2>&1 \
            || printf 'onboard-node: could not remove %s from %s: it holds a copy of the node key\n' "$incoming" "$address" >&2
    fi
    rm -f "$err"
    [ -z "$stage" ] || rm -rf "$stage"
}
trap finish EXIT

# what the machine says, made harmless for this terminal: no control or escape characters
clean() { tr -d '\000-\010\013-\037\177' | tr '\200-\377' '?'; }
said() { tr '\n' ' ' < "$err" | clean | cut -c1-300; }
host_key_refused() {
    die 5 "$address did not present the host key $known_hosts holds for it: this is not the machine first seen at that address (another machine took the address, or this one was rebuilt). If it was rebuilt on purpose: ssh-keygen -f $known_hosts -R $host_entry, then run this again. ssh said: $(said)"
}
ssh_refused() {  # status 255 is ssh's own: no connection, or a host key refused
    grep -qE 'REMOTE HOST IDENTIFICATION HAS CHANGED|Host key verification failed' "$err" && host_key_refused
    [ "$(date +%s)" -lt "$remote_deadline" ] \
        || die 5 "ssh to $ssh_user@$address:$ssh_port did not answer within ${wait_ssh}s: $(said)"
    say "waiting for ssh on $address:$ssh_port${1:+ $1} ($(tail -1 "$err" | clean | cut -c1-120))"
    sleep 1
}

# remote CMD: run CMD on the node, its output cleaned. ssh failing to connect (sshd restarting, the machine
# booting) is retried until the ssh deadline; a changed host key never is; the command's own status is returned.
remote_deadline=0
remote() {
    local rc
    while true; do
        rc=0
        ssh -n "${ssh_opts[@]}" -- "$address" "$1" 2>"$err" | clean || rc=${PIPESTATUS[0]}
        if [ "$rc" -ne 255 ]; then
            clean < "$err" >&2
            return "$rc"
        fi
        ssh_refused
    done
}
q() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }  # quoted for any POSIX login shell

# 1. the node's identity
stage=$(mktemp -d)
say "issuing the certificate for $name (CN and SAN $name, IP $address) from $ca"
[ ! -f "$ca/$name.crt" ] || cp -p "$ca/$name.crt" "$stage/previous.crt"  # an onboarding again: kept if it fails
issued=1
"$llmgw" ca issue "$ca" "$name" --ip "$address" >/dev/null || die 4 "could not issue the certificate"
mkdir "$stage/pki"
cp "$ca/ca.crt" "$stage/pki/ca.crt"
cp "$ca/$name.crt" "$stage/pki/node.crt"
cp "$ca/$name.key" "$stage/pki/node.key"
chmod 600 "$stage/pki/node.key"
# the certificate the node speaks with now, if it is onboarded again: retired once the new one is in use
previous=$("$llmgw" ctl nodes --json --admin "$admin" 2>/dev/null | python3 -c '
import json, sys
print(next((r.get("cert_serial", "") for r in json.load(sys.stdin) if r.get("node") == sys.argv[1]), ""))
' "$name" 2>/dev/null || true)

# 2. the machine answers ssh, with a host key first seen now or the one seen before, and is the node
remote_deadline=$(( $(date +%s) + wait_ssh ))
say "waiting for ssh on $address:$ssh_port"
rc=0
remote true || rc=$?
[ "$rc" -eq 0 ] || die 4 "ssh to $address answers, but running a command there fails (status $rc)"
calls_itself=$(remote hostname | tr -cd 'A-Za-z0-9._-')
say "ssh answers; the machine calls itself $calls_itself"
pinned=""
for kv in "${sets[@]+"${sets[@]}"}"; do [ "$kv" != "node_id=$name" ] || pinned=1; done
if [ -z "$pinned" ] && [ "$calls_itself" != "$name" ] && [ "${calls_itself%%.*}" != "$name" ]; then
    die 3 "the machine at $address calls itself '$calls_itself', not '$name': nothing was sent to it. A node's id is its hostname and must be its certificate's CN: set the hostname there (hostnamectl set-hostname $name), or give --set node_id=$name"
fi

# 3. the bundle and the certificate, copied whole (again if ssh breaks off) and checked there
copy() {
    local rc
    while true; do
        copied=1
        rc=0
        tar -C "$stage" -cf - pki -C "$(cd "$(dirname "$bundle")" && pwd)" "$bundle_name" "$bundle_name.sha256" \
            | ssh "${ssh_opts[@]}" -- "$address" \
                "umask 077 && rm -rf $incoming && mkdir -p $incoming && tar -xf - -C $incoming" 2>"$err" \
            || { local st=("${PIPESTATUS[@]}"); rc=${st[1]}
                 # tar fails too when ssh breaks off under it (SIGPIPE): only with ssh standing is it tar's fault
                 [ "$rc" -eq 255 ] || [ "${st[0]}" -eq 0 ] || die 4 "could not read $bundle"; }
        [ "$rc" -ne 0 ] || return 0
        [ "$rc" -eq 255 ] || die 4 "could not copy the bundle to $incoming on $address (status $rc): $(said)"
        ssh_refused "to copy again"
    done
}
say "copying $bundle_name ($(du -h "$bundle" | cut -f1)) and the certificate"
remote_deadline=$(( $(date +%s) + wait_ssh ))
copy
remote "cd $incoming && sha256sum --quiet -c $(q "$bundle_name.sha256")" \
    || die 4 "the copy on $address does not match $bundle_name.sha256"
say "copied and checked"

# 4. installed from the bundle, agent started. The install runs once: its status is kept on the machine, so a
# connection lost while it ran is answered by that status (install-node.sh waits for an install still running)
args=(--control-plane "$control_planes" --node "$name" --pki "$incoming/pki")
[ -z "$python" ] || args+=(--python "$python")
for kv in "${sets[@]+"${sets[@]}"}"; do args+=(--set "$kv"); done
cmd="cd $incoming && { [ -d $(q "${bundle_name%.tar.gz}") ] || tar -xzf $(q "$bundle_name"); } && ./$(q "${bundle_name%.tar.gz}")/install-node.sh"
for a in "${args[@]}"; do cmd+=" $(q "$a")"; done
say "installing on $name"
rc=0
remote "if [ -f $incoming/.status ]; then exit \$(cat $incoming/.status); fi; $cmd; rc=\$?; echo \$rc > $incoming/.status; exit \$rc" || rc=$?
case "$rc" in
    0) installed=1 ;;
    2|3|4) die "$rc" "the install on $name failed (above)" ;;
    *) die 4 "the install on $name failed with status $rc (above)" ;;
esac
remote "rm -rf $incoming" && copied=""

# 5. the control plane has heard from it, with this certificate
say "waiting for $name to register with the control plane ($admin)"
if ! "$llmgw" ctl nodes wait "$name" --cert "$ca/$name.crt" --timeout "$wait_node" --admin "$admin"; then
    say "what the node's service manager says:"
    ssh -n "${ssh_opts[@]}" -- "$address" "systemctl status llmgw-agent --no-pager -n 30" 2>&1 | clean || true
    die 4 "$name was installed but has not registered with the control plane"
fi
rm -f "$ca/$name.key"  # the node holds its key now; the CA keeps the certificate (for renewals and revocations)
if [ -n "$previous" ] && command -v openssl >/dev/null; then
    serial=$(openssl x509 -noout -serial -in "$ca/$name.crt" | sed 's/^serial=//; s/^0*//' | tr 'A-F' 'a-f')
    if [ "$previous" != "$serial" ]; then
        "$llmgw" ctl nodes revoke "$name" --serial "$previous" --reason "replaced by onboarding (certificate $serial)" \
            --admin "$admin" >/dev/null && say "the certificate $name used before ($previous) is revoked"
    fi
fi
say "$name registered (onboarded in $(( $(date +%s) - started ))s)"
