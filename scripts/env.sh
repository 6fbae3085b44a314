# Shared environment for lake's scripts: sourced, never executed.
# Everything the tests install or build lives in one cache directory outside the clone, so fresh
# clones (CI) and later sessions reuse it.
LAKE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export LAKE_ROOT
export LAKE_CACHE="${LAKE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lake}"
export LAKE_VENV="${LAKE_VENV:-$LAKE_CACHE/venv}"
export LAKE_NODE_PREFIX="${LAKE_NODE_PREFIX:-$LAKE_CACHE/node}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$LAKE_CACHE/target}"
# mold links the large test binaries several times faster than ld.bfd.
if command -v mold >/dev/null 2>&1; then
  export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="${CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS:--C link-arg=-fuse-ld=mold}"
fi
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
export PATH="$LAKE_VENV/bin:$LAKE_NODE_PREFIX/node_modules/.bin:$PATH"
