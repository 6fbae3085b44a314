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
# The workspace's own crates compile through clippy-driver (dependencies through rustc), so the
# one build that makes the tests also lints them with `-D warnings`: a separate `cargo clippy`
# re-checked the whole dependency graph (13 minutes cold). Every scripts/cargo call gets the same
# wrapper and arguments, so what one builds is fresh for the others.
if [ -z "${RUSTC_WORKSPACE_WRAPPER+set}" ]; then
  RUSTC_WORKSPACE_WRAPPER="$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver || true)"
  [ -n "$RUSTC_WORKSPACE_WRAPPER" ] && export RUSTC_WORKSPACE_WRAPPER
fi
export CLIPPY_ARGS="${CLIPPY_ARGS:--D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__}"
export PATH="$LAKE_VENV/bin:$LAKE_NODE_PREFIX/node_modules/.bin:$PATH"
