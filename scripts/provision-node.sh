#!/usr/bin/env bash
# Create a node's VM on Proxmox VE from a cloud-init template (run on the Proxmox host, where `qm` is).
#
#   scripts/provision-node.sh NAME ADDRESS --template ID [options]
#
# NAME becomes the VM's name and, through cloud-init, its hostname (and so the node id). ADDRESS is given as
# ADDRESS/PREFIX or with --prefix. The CPU type is `host`: Proxmox's default kvm64 has no AVX2 and makes CPU
# inference several times slower with nothing looking wrong.
#
# Options:
#   --template ID     the cloud-init template VM to clone (required)
#   --vmid N          default: ADDRESS's last octet, so `qm list` and `llmgw ctl nodes` sort alike (Proxmox
#                     takes 100 and above: below that, give --vmid)
#   --prefix N        network prefix length (default: 24)
#   --gateway IP      default route (default: the network's .1)
#   --cores N         (default: 8)      --memory MIB (default: 32768)     --disk SIZE (default: 200G)
#   --bridge NAME     (default: vmbr0)  --storage NAME (default: local-lvm)
#   --ssh-key FILE    public key cloud-init puts in root's authorized_keys (default: ~/.ssh/id_ed25519.pub)
#   --nameserver IP   (default: the gateway)
#   --dry-run         print the qm commands instead of running them
# Then: scripts/onboard-node.sh NAME ADDRESS ... (or scripts/add-node.sh for both).
set -euo pipefail

die() { code=$1; shift; printf 'provision-node: %s\n' "$*" >&2; exit "$code"; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }

[ $# -ge 1 ] && { [ "$1" = -h ] || [ "$1" = --help ]; } && { usage; exit 0; }
[ $# -ge 2 ] || { usage >&2; exit 2; }
name="$1"
address="$2"
shift 2
template=""
vmid=""
prefix=24
gateway=""
cores=8
memory=32768
disk=200G
bridge=vmbr0
storage=local-lvm
ssh_key="$HOME/.ssh/id_ed25519.pub"
nameserver=""
dry=""
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) dry=1; shift; continue ;;
    esac
    [ $# -ge 2 ] || die 2 "$1 needs a value (see --help)"
    case "$1" in
        --template) template="$2" ;;
        --vmid) vmid="$2" ;;
        --prefix) prefix="$2" ;;
        --gateway) gateway="$2" ;;
        --cores) cores="$2" ;;
        --memory) memory="$2" ;;
        --disk) disk="$2" ;;
        --bridge) bridge="$2" ;;
        --storage) storage="$2" ;;
        --ssh-key) ssh_key="$2" ;;
        --nameserver) nameserver="$2" ;;
        *) die 2 "unknown option $1 (see --help)" ;;
    esac
    shift 2
done

[[ "$name" =~ ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$ ]] \
    || die 2 "'$name' is not a hostname (lowercase letters, digits and '-', at most 63): it is the VM's name, hostname and node id"
if [[ "$address" == */* ]]; then
    prefix="${address#*/}"
    address="${address%/*}"
fi
[[ "$address" =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] || die 2 "'$address' is not an IPv4 address"
for o in "${BASH_REMATCH[@]:1}"; do [ "$o" -le 255 ] || die 2 "'$address' is not an IPv4 address"; done
[[ "$prefix" =~ ^[0-9]+$ ]] && [ "$prefix" -ge 1 ] && [ "$prefix" -le 32 ] || die 2 "--prefix $prefix: must be 1-32"
[ -n "$template" ] || die 2 "--template is required: the VMID of a cloud-init template to clone"
last_octet="${address##*.}"
if [ -z "$vmid" ]; then
    vmid="$last_octet"
    [ "$vmid" -ge 100 ] || die 2 "the VMID would be $vmid (the address's last octet), and Proxmox takes 100 and above: give --vmid"
fi
[[ "$vmid" =~ ^[0-9]+$ ]] && [ "$vmid" -ge 100 ] || die 2 "--vmid $vmid: Proxmox VMIDs are whole numbers from 100"
[ -n "$gateway" ] || gateway="${address%.*}.1"
[ -n "$nameserver" ] || nameserver="$gateway"
# each value goes into one qm option, some of them lists of key=value (net0, ipconfig0): a comma or a blank in
# one would add properties or options of its own choosing, so every value is held to what it names
wrong() { die 2 "$1 $(printf '%q' "$2"): $3"; }
ipv4() {
    [[ "$1" =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] || return 1
    for o in "${BASH_REMATCH[@]:1}"; do [ "$((10#$o))" -le 255 ] || return 1; done
}
ipv4 "$gateway" || wrong --gateway "$gateway" "an IPv4 address"
ipv4 "$nameserver" || wrong --nameserver "$nameserver" "an IPv4 address"
[[ "$template" =~ ^[0-9]{1,9}$ ]] || wrong --template "$template" "a VMID (a whole number)"
[[ "$cores" =~ ^[0-9]{1,4}$ ]] && [ "$cores" -ge 1 ] || wrong --cores "$cores" "a whole number of cores"
[[ "$memory" =~ ^[0-9]{1,8}$ ]] && [ "$memory" -ge 16 ] || wrong --memory "$memory" "MiB, a whole number"
[[ "$disk" =~ ^[0-9]{1,6}[KMGT]?$ ]] || wrong --disk "$disk" "a size such as 200G"
[[ "$bridge" =~ ^[A-Za-z][A-Za-z0-9_.-]{0,14}$ ]] || wrong --bridge "$bridge" "a bridge name such as vmbr0"
[[ "$storage" =~ ^[A-Za-z][A-Za-z0-9_.-]{0,63}$ ]] || wrong --storage "$storage" "a storage name such as local-lvm"
[[ "$ssh_key" != -* && ! "$ssh_key" =~ [[:cntrl:]] ]] || wrong --ssh-key "$ssh_key" "a file name not starting with '-'"
[ -f "$ssh_key" ] || die 2 "no public key at $ssh_key (give --ssh-key): without one nothing can log in to onboard the node"

run() {
    if [ -n "$dry" ]; then printf '%q ' "$@"; echo; else "$@"; fi
}
command -v qm >/dev/null || [ -n "$dry" ] || die 2 "no qm here: run this on the Proxmox host (or --dry-run)"
if [ -z "$dry" ] && qm status "$vmid" >/dev/null 2>&1; then
    die 2 "VMID $vmid exists already (qm status $vmid): give another --vmid, or destroy that VM first"
fi

run qm clone "$template" "$vmid" --name "$name" --full 1 --storage "$storage"
run qm set "$vmid" --cpu host --cores "$cores" --memory "$memory" --net0 "virtio,bridge=$bridge" \
    --ipconfig0 "ip=$address/$prefix,gw=$gateway" --nameserver "$nameserver" --ciuser root \
    --sshkeys "$ssh_key" --onboot 1
run qm resize "$vmid" scsi0 "$disk"
run qm start "$vmid"
echo "VM $vmid ($name) started at $address; next: scripts/onboard-node.sh $name $address --control-plane URL"
