#!/usr/bin/env bash
# Install this release bundle's llmgw into /opt/llmgw and make it the current one (run as root, from the unpacked
# bundle). install-node.sh runs it on nodes; on a control plane run it yourself (docs/install.md).
#
#   ./install-release.sh [--python PATH] [--prepare | --switch DIR]
#
# --python    the CPython this bundle's wheels are for (default: python3.11, else python3 if it is that version)
# --prepare   install the release but do not make it current; print its directory (the last line)
# --switch    make DIR (a release directory marked complete) the current one, nothing else
#
# Checks the bundle against SHA256SUMS; makes a virtual environment for this release under /opt/llmgw/releases/
# from the bundle's wheels only (--no-index --require-hashes), marked complete last; points /opt/llmgw/.venv at it
# with one rename, so /opt/llmgw/.venv/bin/llmgw (what the systemd units run) is always a whole release.
# Exit status: 0 done, 2 wrong use, 3 this machine cannot take the bundle, 4 a step failed.
set -euo pipefail

say() { printf 'install-release: %s\n' "$*" >&2; }
die() { code=$1; shift; printf 'install-release: %s\n' "$*" >&2; exit "$code"; }

here=$(cd "$(dirname "$0")" && pwd)
python=""
mode=all
switch_to=""
while [ $# -gt 0 ]; do
    case "$1" in
        --python) [ $# -ge 2 ] || die 2 "--python needs a path"; python="$2"; shift 2 ;;
        --prepare) mode=prepare; shift ;;
        --switch) [ $# -ge 2 ] || die 2 "--switch needs a directory"; mode=switch; switch_to="$2"; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) die 2 "unknown argument $1 (see --help)" ;;
    esac
done
[ "$(id -u)" = 0 ] || die 2 "run as root: it installs under /opt/llmgw"
trap 'die 4 "a step failed (line $LINENO: $BASH_COMMAND)"' ERR
mkdir -p /opt/llmgw
if [ -z "${LLMGW_INSTALL_LOCKED:-}" ]; then  # one install at a time (install-node.sh holds it for us)
    exec 9>>/opt/llmgw/.install.lock
    flock -w 900 9 || die 4 "another install has held /opt/llmgw/.install.lock for 15 minutes"
fi

# /opt/llmgw/.venv -> releases/X, replaced by one rename: whoever starts llmgw finds a whole release or the old one
switch() {
    [ -f "$1/.complete" ] || die 2 "$1 is not a complete release (no .complete)"
    if [ -d /opt/llmgw/.venv ] && [ ! -L /opt/llmgw/.venv ]; then
        mv /opt/llmgw/.venv "/opt/llmgw/releases/by-hand-$(date +%Y%m%d%H%M%S)"  # an install made by hand, kept
    fi
    ln -sfn "releases/$(basename "$1")" /opt/llmgw/.venv.new
    mv -Tf /opt/llmgw/.venv.new /opt/llmgw/.venv
}
if [ "$mode" = switch ]; then
    switch "$switch_to"
    exit 0
fi

# 1. the bundle, as built
cd "$here"
[ -f SHA256SUMS ] && [ -f RELEASE ] || die 3 "$here is not an unpacked llmgw bundle (no SHA256SUMS or RELEASE)"
if ! bad=$(sha256sum --quiet -c SHA256SUMS 2>&1); then
    die 3 "the bundle in $here is damaged or altered; sha256sum says: $bad"
fi
release() { sed -n "s/^$1=//p" RELEASE; }
version=$(release version)
want_py=$(release python)
want_arch=$(release arch)
[ "$(uname -m)" = "$want_arch" ] || die 3 "this bundle is for $want_arch; this machine is $(uname -m): build one on a $(uname -m) machine"

# 2. a Python of the version its wheels are for
if [ -z "$python" ]; then
    python=$(command -v python3.11 || command -v python3 || true)
    [ -n "$python" ] || die 3 "no python3.11 on PATH: install it (Debian 12: apt-get install python3 python3-venv), or give --python"
fi
have_py=$("$python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")' 2>/dev/null) \
    || die 3 "$python does not run"
[ "$have_py" = "$want_py" ] || die 3 "this bundle's wheels are for $want_py; $python is $have_py: give --python a $want_py, or build the bundle with one"
"$python" -c 'import ensurepip, venv' 2>/dev/null \
    || die 3 "$python cannot make virtual environments (Debian: apt-get install python3-venv)"

# 3. this release's environment, built beside the others and marked complete last
sums=$(sha256sum SHA256SUMS | cut -c1-12)
target="/opt/llmgw/releases/llmgw-$version-$sums"
if [ ! -f "$target/.complete" ]; then
    say "installing llmgw $version ($(release commit | cut -c1-12)) into $target"
    rm -rf "$target"
    mkdir -p /opt/llmgw/releases
    "$python" -m venv "$target" || die 4 "could not make a virtual environment at $target"
    if ! out=$("$target/bin/python" -m pip install -q --disable-pip-version-check --no-index --require-hashes \
            --find-links "$here/wheels" -r "$here/requirements.txt" 2>&1); then
        rm -rf "$target"
        die 4 "pip could not install the bundle's wheels: $out"
    fi
    "$target/bin/llmgw" --version >/dev/null || { rm -rf "$target"; die 4 "the installed llmgw does not run"; }
    touch "$target/.complete"
else
    say "llmgw $version is already installed at $target"
fi
if [ "$mode" = prepare ]; then
    echo "$target"
else
    switch "$target"
fi
