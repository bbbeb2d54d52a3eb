#!/bin/sh
# Installs the Debian packages kvlm needs, if they are missing.
#   scripts/setup.sh          build and test dependencies (abigail-tools: make abi-check)
#   scripts/setup.sh --dev    also PyTorch, NumPy, jinja2 and OpenBLAS (the models' training commands
#                             put it first with LD_LIBRARY_PATH), to regenerate fixtures and train
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
#   scripts/setup.sh --wait-lock  only wait for the package manager's locks,
#                             as an install would, and exit (tests)
#   scripts/setup.sh --arm64  on x86-64: also the aarch64 cross compiler,
#                             QEMU user-mode emulation and the arm64 builds
#                             of the libraries kvlm links (dpkg's arm64
#                             architecture is added first), for
#                             `make CROSS=aarch64` and `make test-aarch64`
#                             (docs/arm64.md)
# Runs apt-get directly as root, through sudo otherwise.
#
# Another apt-get or dpkg (often unattended upgrades on a machine that has
# just booted) may hold the package manager's locks. Before installing,
# setup waits for them up to KVLM_SETUP_LOCK_WAIT seconds (default 300),
# saying what holds them, and then fails naming the holder; apt-get itself
# is given the same bound (DPkg::Lock::Timeout) for a lock taken between
# the check and the install. KVLM_SETUP_LOCKS replaces the list of lock
# files (tests use a file of their own).
set -eu

lock_wait=${KVLM_SETUP_LOCK_WAIT:-300}
locks=${KVLM_SETUP_LOCKS:-/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock}

# The processes holding a lock on file $1 (flock or fcntl), one
# "PID COMMAND LINE" a line, from /proc/locks (no root needed, the file is
# never opened); fuser's answer when /proc/locks is not there.
lock_holders() {
    [ -e "$1" ] || return 0
    if [ -r /proc/locks ]; then
        d=$((0x$(stat -c %D "$1"))) || return 0 # st_dev, as /proc/locks prints it: major:minor:inode
        id=$(printf '%02x:%02x:%s' $(((d >> 8 & 0xfff) | (d >> 32 & ~0xfff))) $(((d & 0xff) | (d >> 12 & ~0xff))) \
            "$(stat -c %i "$1")")
        for pid in $(awk -v id="$id" '$2 != "->" && $6 == id { print $5 }' /proc/locks | sort -u); do
            echo "$pid $(ps -o args= -p "$pid" 2>/dev/null || echo '?')"
        done
    elif command -v fuser >/dev/null 2>&1; then
        for pid in $(fuser "$1" 2>/dev/null); do
            echo "$pid $(ps -o args= -p "$pid" 2>/dev/null || echo '?')"
        done
    fi
}

# Waits until no lock file is held, up to lock_wait seconds; says once
# what it waits for (and again every minute); returns 1 naming the
# holders when the time is up.
wait_for_locks() {
    waited=0
    while :; do
        held=""
        for f in $locks; do
            h=$(lock_holders "$f")
            [ -z "$h" ] || held="$held$f held by process $(echo "$h" | head -n 1)
"
        done
        [ -n "$held" ] || return 0
        if [ "$waited" -ge "$lock_wait" ]; then
            printf 'setup: the package manager is still busy after %ss:\n%s' "$waited" "$held" | sed '2,$s/^/  /' >&2
            echo "setup: let it finish (or stop it), then run make again; KVLM_SETUP_LOCK_WAIT=SECONDS waits longer" >&2
            return 1
        fi
        if [ $((waited % 60)) -eq 0 ]; then
            printf 'setup: waiting up to %ss for the package manager:\n%s' "$((lock_wait - waited))" "$held" |
                sed '2,$s/^/  /'
        fi
        sleep 1
        waited=$((waited + 1))
    done
}

if [ "${1:-}" = "--wait-lock" ]; then
    wait_for_locks || exit 1
    echo "setup: the package manager's locks are free"
    exit 0
fi

pkgs="gcc make libc6-dev libgomp1 libjansson-dev libpcre2-dev libcmocka-dev libxxhash-dev libmicrohttpd-dev pkg-config xz-utils python3 python3-jsonschema abigail-tools"
if [ "${1:-}" = "--dev" ]; then
    pkgs="$pkgs python3 python3-torch python3-numpy python3-jinja2 libopenblas0-pthread"
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
if [ "${1:-}" = "--arm64" ]; then
    # The -dev packages of the arm64 architecture (multiarch) install beside
    # the native ones; the cross compiler searches their directories.
    pkgs="$pkgs gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static"
    pkgs="$pkgs libgomp1:arm64 libjansson-dev:arm64 libpcre2-dev:arm64 libcmocka-dev:arm64 libxxhash-dev:arm64 libmicrohttpd-dev:arm64"
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then
        if [ "$(id -u)" -eq 0 ]; then dpkg --add-architecture arm64; else sudo dpkg --add-architecture arm64; fi
    fi
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
wait_for_locks || exit 1
echo "setup: installing$missing"
export DEBIAN_FRONTEND=noninteractive
$run apt-get update -qq -o DPkg::Lock::Timeout="$lock_wait" ||
    echo "setup: apt-get update failed; trying the install with the current package lists" >&2
# shellcheck disable=SC2086
$run apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout="$lock_wait" $missing
npm_modules "${1:-}"
