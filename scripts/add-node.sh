#!/usr/bin/env bash
# A node from nothing, in one command: the VM (provision-node.sh) and its identity (onboard-node.sh), with the VM
# name, hostname, node id and certificate CN stated once, as NAME, and the address once, as ADDRESS.
#
#   scripts/add-node.sh NAME ADDRESS --template ID --control-plane URL[,URL...] [options of either half]
#
# Run it on a host that has both qm (Proxmox) and the CA. Where those are different machines, run the halves
# there: they need different access, which is why they stay separate scripts.
# Options of provision-node.sh: --template --vmid --prefix --gateway --cores --memory --disk --bridge --storage
#   --ssh-key --nameserver. Every other option goes to onboard-node.sh (--control-plane, --ca, --bundle, --admin,
#   --set, --python, --ssh-user, --ssh-port, --identity, --known-hosts, --wait-ssh, --wait-node).
# ADDRESS may carry its prefix (10.0.0.105/24); onboarding is given the bare address.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
if [ $# -lt 2 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    [ $# -ge 1 ] && { [ "$1" = -h ] || [ "$1" = --help ]; } && exit 0
    exit 2
fi
name="$1"
address="$2"
shift 2
provision=()
onboard=()
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || { echo "add-node: $1 needs a value" >&2; exit 2; }
    case "$1" in
        --template|--vmid|--prefix|--gateway|--cores|--memory|--disk|--bridge|--storage|--ssh-key|--nameserver)
            provision+=("$1" "$2") ;;
        *) onboard+=("$1" "$2") ;;
    esac
    shift 2
done
"$here/provision-node.sh" "$name" "$address" "${provision[@]+"${provision[@]}"}"
exec "$here/onboard-node.sh" "$name" "${address%/*}" "${onboard[@]+"${onboard[@]}"}"
