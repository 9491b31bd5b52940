#!/usr/bin/env bash
# A release bundle: llmgw's wheel, the wheels of its locked runtime dependencies, a hash-pinned requirements file,
# the installers (install-release.sh for any machine, install-node.sh for nodes) and the systemd units, with
# SHA256SUMS over all of it. A machine with no package index installs exactly this release from it, verified
# (pip install --require-hashes --no-index).
#
#   scripts/build-bundle.sh                 # from the committed HEAD (git archive): what a release is
#   scripts/build-bundle.sh --tree          # from the working tree as it is (marked so in RELEASE)
#   scripts/build-bundle.sh --out DIR       # where the tarball goes (default: dist/)
#
# Prints the tarball's path. Beside it: TARBALL.sha256, which onboarding checks the node's copy against.
# The wheels are for this machine's Python (its version and architecture are in the name and in RELEASE):
# build on the Python your nodes have (Debian 12: 3.11).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/dist"
from_tree=""
python="${PYTHON:-$root/.venv/bin/python}"
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out="$2"; shift 2 ;;
        --tree) from_tree=1; shift ;;
        --python) python="$2"; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "build-bundle: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ -x "$python" ] || { echo "build-bundle: no Python at $python (make .venv/bin/.installed, or --python)" >&2; exit 2; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

commit=unknown
tree=clean
if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
    commit=$(git -C "$root" rev-parse HEAD)
    if [ -n "$from_tree" ]; then
        [ -z "$(git -C "$root" status --porcelain --untracked-files=no)" ] || tree=modified
    fi
elif [ -z "$from_tree" ]; then
    echo "build-bundle: $root is not a git checkout: give --tree to build from the files as they are" >&2
    exit 2
fi
if [ -n "$from_tree" ]; then
    # a copy, built there: pip builds a local project in place (setuptools' build/ and egg-info in the tree), so
    # two builds from one tree at once collided, and a build left files in it
    src="$stage/src"
    mkdir -p "$src"
    if [ "$commit" != unknown ]; then  # the files git would show: tracked, and untracked but not ignored
        git -C "$root" ls-files -z -co --exclude-standard | tar -C "$root" --ignore-failed-read --null -T - -cf - | tar -x -C "$src"
    else
        tar -C "$root" --exclude=./.venv --exclude=./build --exclude=./dist --exclude='*.egg-info' -cf - . \
            | tar -x -C "$src"
    fi
    source_kind="working tree ($tree)"
else
    src="$stage/src"
    mkdir -p "$src"
    git -C "$root" archive HEAD | tar -x -C "$src"
    source_kind="commit"
fi

read -r version pytag arch < <("$python" - "$src/pyproject.toml" <<'EOF'
import platform, sys, tomllib
with open(sys.argv[1], "rb") as f:
    v = tomllib.load(f)["project"]["version"]
print(v, f"cp{sys.version_info[0]}{sys.version_info[1]}", platform.machine())
EOF
)
name="llmgw-$version-$pytag-$arch"
dir="$stage/$name"
mkdir -p "$dir/wheels"

# llmgw and exactly the locked versions of what it needs at run time (not the test tools the lock also pins)
"$python" -m pip wheel -q --disable-pip-version-check --wheel-dir "$dir/wheels" "$src" -c "$src/requirements.lock"
"$python" - "$dir" <<'EOF'
import hashlib, pathlib, sys
d = pathlib.Path(sys.argv[1])
lines = []
for w in sorted((d / "wheels").glob("*.whl")):
    name, version = w.name.split("-")[:2]
    digest = hashlib.sha256(w.read_bytes()).hexdigest()
    lines.append(f"{name}=={version} --hash=sha256:{digest}")
(d / "requirements.txt").write_text("\n".join(lines) + "\n")
EOF
# everything from the same source as the wheel: a bundle from HEAD carries HEAD's installers, not the tree's
install -m 0755 "$src/scripts/install-release.sh" "$dir/install-release.sh"
install -m 0755 "$src/scripts/install-node.sh" "$dir/install-node.sh"
install -m 0644 "$src/deploy/systemd/llmgw-agent.service" "$dir/llmgw-agent.service"
install -m 0644 "$src/deploy/systemd/llmgw-server.service" "$dir/llmgw-server.service"
cat > "$dir/RELEASE" <<EOF
version=$version
commit=$commit
source=$source_kind
python=$pytag
arch=$arch
built=$(date -u +%Y-%m-%dT%H:%M:%SZ)
EOF
(cd "$dir" && find . -type f | LC_ALL=C sort | sed 's|^\./||' | xargs sha256sum > "$stage/SHA256SUMS")
mv "$stage/SHA256SUMS" "$dir/SHA256SUMS"

mkdir -p "$out"
tarball="$out/$name.tar.gz"
tar -C "$stage" -czf "$tarball.part" "$name"
mv -f "$tarball.part" "$tarball"  # whole or not there: a build cut short leaves only the .part
(cd "$out" && sha256sum "$name.tar.gz" > "$name.tar.gz.sha256.part" && mv -f "$name.tar.gz.sha256.part" "$name.tar.gz.sha256")
echo "$tarball"
