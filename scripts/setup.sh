#!/bin/sh
# Installs the Debian packages kvlm needs, if they are missing.
#   scripts/setup.sh          build and test dependencies (abigail-tools: make abi-check)
#   scripts/setup.sh --dev    also PyTorch, NumPy and jinja2, to regenerate fixtures
#   scripts/setup.sh --fuzz   also clang, its sanitizer and libFuzzer runtimes
#                             and its OpenMP runtime, for `make fuzz`
#   scripts/setup.sh --browser  also chromium, and Node.js and npm where no
#                             node or npm is on the PATH, then the browser
#                             test's pinned playwright-core (npm ci in
#                             tests/browser, from its package-lock.json), for
#                             `make test-browser` and `make screenshots`
#   scripts/setup.sh --sdk    also Node.js and npm where no node or npm is on
#                             the PATH, then the pinned Anthropic and OpenAI
#                             SDKs (npm ci in tests/sdk), for `make test-sdk`
#   scripts/setup.sh --cluster  also haproxy, for `make test-cluster`
#                             (docs/deploy.md)
# Runs apt-get directly as root, through sudo otherwise.
set -eu

pkgs="gcc make libc6-dev libgomp1 libjansson-dev libpcre2-dev libcmocka-dev libxxhash-dev libmicrohttpd-dev pkg-config xz-utils python3 python3-jsonschema abigail-tools"
if [ "${1:-}" = "--dev" ]; then
    pkgs="$pkgs python3 python3-torch python3-numpy python3-jinja2"
fi
if [ "${1:-}" = "--fuzz" ]; then
    pkgs="$pkgs clang libclang-rt-dev libomp-dev"
fi
if [ "${1:-}" = "--cluster" ]; then
    pkgs="$pkgs haproxy"
fi
if [ "${1:-}" = "--sdk" ]; then
    command -v node >/dev/null 2>&1 || pkgs="$pkgs nodejs"
    command -v npm >/dev/null 2>&1 || pkgs="$pkgs npm"
fi
if [ "${1:-}" = "--browser" ]; then
    pkgs="$pkgs chromium"
    command -v node >/dev/null 2>&1 || pkgs="$pkgs nodejs"
    command -v npm >/dev/null 2>&1 || pkgs="$pkgs npm"
fi

# The browser test's (or the SDK test's) node modules, installed again
# whenever the lock file changed (a copy of the lock installed last is kept
# beside them).
npm_modules() {
    case "${1:-}" in
    --browser) dir="$(dirname "$0")/../tests/browser" ;;
    --sdk) dir="$(dirname "$0")/../tests/sdk" ;;
    *) return 0 ;;
    esac
    if cmp -s "$dir/package-lock.json" "$dir/node_modules/.kvlm-installed-lock" 2>/dev/null; then
        return 0
    fi
    echo "setup: npm ci in $dir"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.kvlm-installed-lock)
}

missing=""
for p in $pkgs; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
if [ -z "$missing" ]; then
    echo "setup: all packages present"
    npm_modules "${1:-}"
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    run=""
elif command -v sudo >/dev/null 2>&1; then
    run="sudo"
else
    echo "setup: missing Debian packages:$missing" >&2
    echo "setup: run as root or install sudo, then: apt-get install$missing" >&2
    exit 1
fi
echo "setup: installing$missing"
export DEBIAN_FRONTEND=noninteractive
$run apt-get update -qq || echo "setup: apt-get update failed; trying the install with the current package lists" >&2
# shellcheck disable=SC2086
$run apt-get install -y -qq --no-install-recommends $missing
npm_modules "${1:-}"
