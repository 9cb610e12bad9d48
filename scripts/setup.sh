#!/usr/bin/env bash
# Prepare everything Weir needs to build, test and run on this machine.
#
#   scripts/setup.sh [--no-apt] [--no-ort] [--no-venv] [--no-broker]
#
# Idempotent and cheap to re-run: every step checks first and only does work
# when something is missing or out of date. What it installs and where is
# described in docs/SETUP.md.
#
#   apt      build packages for the Rust workspace (rdkafka-sys builds librdkafka)
#   ort      ONNX Runtime shared library -> <repo>/.cache/onnxruntime/libonnxruntime.so
#   venv     Python tools (xgboost, onnx converters) -> <repo>/.cache/venv
#   broker   tansu Kafka-protocol broker -> ~/.cache/weir/tansu-<version>/bin/tansu
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="$REPO_ROOT/.cache"

# Must match `onnxruntime==` in scripts/requirements.txt and the ORT API level
# the `ort` crate is built against (features = ["api-31", "load-dynamic"]).
ORT_VERSION="1.32.0"
ORT_DIR="$CACHE_DIR/onnxruntime"
# sha256 of the wheels we have checked by hand. Other platforms are still
# checked against the hash the package index reports (see fetch_ort_wheel).
declare -A ORT_KNOWN_WHEEL_SHA256=(
    ["onnxruntime-1.32.0-cp311-cp311-manylinux_2_28_x86_64.whl"]="5a34fc4dfeb5a7b4a74c95dcba1e773d722abda720b474edf1b0c419dc6d163d"
)

VENV_DIR="$CACHE_DIR/venv"
REQUIREMENTS="$REPO_ROOT/scripts/requirements.txt"
PYTHON="${PYTHON:-python3}"

# The broker binary lives in a machine-level cache shared by every clone
# (CI runs fresh clones on the same machine; building tansu takes ~10 min).
TANSU_VERSION="0.6.0"
TANSU_FEATURES="dynostore,libsql"
WEIR_MACHINE_CACHE="${WEIR_MACHINE_CACHE:-$HOME/.cache/weir}"
TANSU_ROOT="$WEIR_MACHINE_CACHE/tansu-$TANSU_VERSION"
TANSU_BIN="$TANSU_ROOT/bin/tansu"

# Packages needed to build the workspace. rdkafka-sys (features libz, tokio,
# ssl, gssapi, zstd-pkg-config; see Cargo.toml) runs librdkafka's mklove
# ./configure + make, which needs bash, a C/C++ toolchain, make and
# pkg-config, and links the system libraries found through pkg-config:
# zlib1g-dev (gzip), libssl-dev (TLS, SASL SCRAM and OAUTHBEARER),
# libsasl2-dev (Cyrus SASL: GSSAPI/Kerberos) and libzstd-dev (zstd). lz4,
# snappy and SASL PLAIN are built into librdkafka. Kerberos clients also need
# the GSSAPI plugin at run time (libsasl2-modules-gssapi-mit, not installed
# here: no test uses it).
# iproute2 (ip netns, veth) and procps (sysctl): jobs/tests/netns_supervise.rs.
# chromium (headless) and fonts-dejavu-core (its text): jobs/tests/status_page.rs loads the
# status page in it.
APT_PACKAGES=(build-essential pkg-config zlib1g-dev libssl-dev libsasl2-dev libzstd-dev ca-certificates libgomp1 iproute2 procps chromium fonts-dejavu-core)

do_apt=1 do_ort=1 do_venv=1 do_broker=1

# Temporary directories removed on exit, even when a step fails.
CLEANUP_DIRS=()
cleanup() { ((${#CLEANUP_DIRS[@]} == 0)) || rm -rf "${CLEANUP_DIRS[@]}"; }
trap cleanup EXIT

log() { printf '[setup] %s\n' "$*"; }
warn() { printf '[setup] WARNING: %s\n' "$*" >&2; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

usage() { sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

parse_args() {
    while (($#)); do
        case "$1" in
            --no-apt) do_apt=0 ;;
            --no-ort) do_ort=0 ;;
            --no-venv) do_venv=0 ;;
            --no-broker) do_broker=0 ;;
            -h | --help) usage; exit 0 ;;
            *) usage >&2; die "unknown option: $1" ;;
        esac
        shift
    done
}

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# ---------------------------------------------------------------------------
# apt packages
# ---------------------------------------------------------------------------
apt_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

ensure_apt_packages() {
    if ! command -v dpkg-query >/dev/null; then
        warn "not a Debian/Ubuntu system: make sure a C toolchain, make, pkg-config and zlib headers are installed"
        return
    fi
    local missing=() pkg
    for pkg in "${APT_PACKAGES[@]}"; do
        apt_installed "$pkg" || missing+=("$pkg")
    done
    # A Debian system python needs python3-venv for `python3 -m venv` (pyenv/
    # upstream builds ship venv + ensurepip themselves).
    if ((do_venv)) && ! "$PYTHON" -c 'import venv, ensurepip' 2>/dev/null; then
        missing+=(python3-venv)
    fi
    if ((${#missing[@]} == 0)); then
        log "apt: build packages present (${APT_PACKAGES[*]})"
        return
    fi
    local sudo=()
    if ((EUID != 0)); then
        command -v sudo >/dev/null || die "missing packages ${missing[*]} and not root (install them, or re-run with --no-apt)"
        sudo=(sudo)
    fi
    log "apt: installing ${missing[*]}"
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

ensure_rust_toolchain() {
    # rustup puts cargo here; non-login shells (CI) may not have it on PATH.
    if ! command -v cargo >/dev/null && [[ -x "$HOME/.cargo/bin/cargo" ]]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
    command -v cargo >/dev/null || die "cargo not found: install Rust (https://rustup.rs), then re-run"
    local comp
    for comp in rustfmt clippy; do
        if ! cargo "${comp/rustfmt/fmt}" --version >/dev/null 2>&1; then
            if command -v rustup >/dev/null; then
                log "rust: adding component $comp"
                rustup component add "$comp"
            else
                warn "cargo $comp is missing (needed by scripts/test.sh)"
            fi
        fi
    done
    log "rust: $(cargo --version)"
}

# ---------------------------------------------------------------------------
# ONNX Runtime shared library (weir dlopens it through the `ort` crate)
# ---------------------------------------------------------------------------

# Prints the wheel sha256 the package index reports for onnxruntime==VERSION
# on this platform (pip's resolution report), or nothing if pip cannot say.
index_reported_sha256() {
    local report="$1/report.json"
    "$PYTHON" -m pip install --dry-run --ignore-installed --no-deps --only-binary=:all: \
        --quiet --report "$report" "onnxruntime==$ORT_VERSION" >/dev/null 2>&1 || return 0
    "$PYTHON" - "$report" <<'PY' || true
import json, sys
for item in json.load(open(sys.argv[1])).get("install", []):
    h = item.get("download_info", {}).get("archive_info", {}).get("hashes", {}).get("sha256")
    if h:
        print(h)
PY
}

# Extracts onnxruntime/capi/libonnxruntime*.so* from the wheel into DEST,
# checks each file against the wheel's RECORD hashes and that the main
# library is an ELF shared object.
extract_ort_lib() {
    local wheel="$1" dest="$2"
    "$PYTHON" - "$wheel" "$dest" "$ORT_VERSION" <<'PY'
import base64, hashlib, os, sys, zipfile
wheel, dest, version = sys.argv[1:4]
z = zipfile.ZipFile(wheel)
record_name = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
record = {}
for line in z.read(record_name).decode().splitlines():
    parts = line.rsplit(",", 2)
    if len(parts) == 3 and parts[1].startswith("sha256="):
        record[parts[0]] = parts[1][len("sha256="):]
members = [n for n in z.namelist()
           if n.startswith("onnxruntime/capi/libonnxruntime") and ".so" in os.path.basename(n)]
main = f"onnxruntime/capi/libonnxruntime.so.{version}"
if main not in members:
    sys.exit(f"{main} not found in {wheel}; members: {members}")
for name in members:
    data = z.read(name)
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    if record.get(name) != digest:
        sys.exit(f"{name}: sha256 does not match the wheel's RECORD")
    out = os.path.join(dest, os.path.basename(name))
    with open(out + ".part", "wb") as f:
        f.write(data)
    os.chmod(out + ".part", 0o755)
    os.replace(out + ".part", out)   # atomic: running processes keep the old inode
    print(os.path.basename(name))
with open(os.path.join(dest, os.path.basename(main)), "rb") as f:
    head = f.read(18)
# ELF magic, and e_type (little-endian u16 at offset 16) == ET_DYN (3)
if head[:4] != b"\x7fELF" or int.from_bytes(head[16:18], "little") != 3:
    sys.exit(f"{main} is not an ELF shared object")
PY
}

ort_is_current() {
    local stamp="$ORT_DIR/.weir-stamp"
    [[ -f "$stamp" && "$(head -n1 "$stamp")" == "onnxruntime $ORT_VERSION" ]] || return 1
    [[ -f "$ORT_DIR/libonnxruntime.so" ]] || return 1
    # ELF magic of the resolved file
    [[ "$(head -c4 "$ORT_DIR/libonnxruntime.so" | od -An -c | tr -d ' ')" == '177ELF' ]]
}

ensure_onnxruntime() {
    if ort_is_current; then
        log "onnxruntime: $ORT_VERSION present at $ORT_DIR/libonnxruntime.so"
        return
    fi
    log "onnxruntime: fetching onnxruntime==$ORT_VERSION wheel from PyPI (pip cache is reused)"
    mkdir -p "$ORT_DIR"
    local tmp
    tmp="$(mktemp -d "$CACHE_DIR/ort-download.XXXXXX")"
    CLEANUP_DIRS+=("$tmp")
    "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: \
        --dest "$tmp" "onnxruntime==$ORT_VERSION"
    local wheel name actual expected
    wheel="$(find "$tmp" -maxdepth 1 -name "onnxruntime-$ORT_VERSION-*.whl" | head -n1)"
    [[ -n "$wheel" ]] || die "pip did not produce an onnxruntime $ORT_VERSION wheel"
    name="$(basename "$wheel")"
    actual="$(sha256_of "$wheel")"
    expected="$(index_reported_sha256 "$tmp")"
    if [[ -n "$expected" ]]; then
        [[ "$actual" == "$expected" ]] || die "$name: sha256 $actual != index-reported $expected"
        log "onnxruntime: $name sha256 matches the index ($actual)"
    else
        warn "could not get the index-reported sha256 for $name; relying on RECORD + ELF checks"
    fi
    if [[ -n "${ORT_KNOWN_WHEEL_SHA256[$name]:-}" && "${ORT_KNOWN_WHEEL_SHA256[$name]}" != "$actual" ]]; then
        die "$name: sha256 $actual != pinned ${ORT_KNOWN_WHEEL_SHA256[$name]}"
    fi
    log "onnxruntime: extracting libraries into $ORT_DIR"
    extract_ort_lib "$wheel" "$ORT_DIR" | sed 's/^/[setup]   /'
    # weir and the `ort` crate look for the unversioned name; the SONAME is
    # libonnxruntime.so.1.
    ln -sfn "libonnxruntime.so.$ORT_VERSION" "$ORT_DIR/libonnxruntime.so"
    ln -sfn "libonnxruntime.so.$ORT_VERSION" "$ORT_DIR/libonnxruntime.so.1"
    printf 'onnxruntime %s\n%s %s\n' "$ORT_VERSION" "$name" "$actual" >"$ORT_DIR/.weir-stamp"
    rm -rf "$tmp"
    log "onnxruntime: ready: $ORT_DIR/libonnxruntime.so -> libonnxruntime.so.$ORT_VERSION"
}

# ---------------------------------------------------------------------------
# Python virtualenv
# ---------------------------------------------------------------------------
ensure_venv() {
    local stamp="$VENV_DIR/.weir-requirements.sha256" want
    # The stamp covers the requirements and the interpreter they were built for.
    want="$( { cat "$REQUIREMENTS"; "$PYTHON" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1)"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$VENV_DIR/bin/python" ]] \
        && "$VENV_DIR/bin/python" -c 'pass' 2>/dev/null; then
        log "venv: up to date ($VENV_DIR)"
        return
    fi
    if [[ -e "$VENV_DIR" ]] && ! "$VENV_DIR/bin/python" -c 'pass' 2>/dev/null; then
        log "venv: $VENV_DIR is broken (interpreter moved?); recreating"
        rm -rf "$VENV_DIR"
    fi
    if [[ ! -x "$VENV_DIR/bin/python" ]]; then
        log "venv: creating $VENV_DIR with $("$PYTHON" --version 2>&1)"
        "$PYTHON" -m venv "$VENV_DIR"
    fi
    rm -f "$stamp"
    log "venv: installing scripts/requirements.txt (binary wheels only; ~30 s cold)"
    "$VENV_DIR/bin/python" -m pip install --quiet --disable-pip-version-check \
        --only-binary=:all: -r "$REQUIREMENTS"
    "$VENV_DIR/bin/python" -m pip check >/dev/null || die "venv: pip check reports broken requirements"
    "$VENV_DIR/bin/python" - "$ORT_VERSION" <<'PY' || die "venv: import check failed"
import sys
import numpy, sklearn, xgboost, lightgbm, onnx, onnxmltools, skl2onnx, onnxruntime
if onnxruntime.__version__ != sys.argv[1]:
    sys.exit(f"onnxruntime {onnxruntime.__version__} in venv, expected {sys.argv[1]}")
print(f"[setup]   numpy {numpy.__version__}, scikit-learn {sklearn.__version__}, "
      f"xgboost {xgboost.__version__}, lightgbm {lightgbm.__version__}, onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}")
PY
    printf '%s\n' "$want" >"$stamp"
    log "venv: ready ($VENV_DIR)"
}

# ---------------------------------------------------------------------------
# tansu broker (machine-level cache)
# ---------------------------------------------------------------------------
tansu_ok() { [[ -x "$TANSU_BIN" ]] && "$TANSU_BIN" --version >/dev/null 2>&1; }

# Pids of `cargo install tansu` runs targeting our root (e.g. one started by
# hand or by another clone's setup that does not hold our lock).
other_tansu_installs() {
    pgrep -f "cargo install tansu .*--root $TANSU_ROOT" 2>/dev/null || true
}

ensure_tansu() {
    if tansu_ok; then
        log "broker: tansu $TANSU_VERSION present ($TANSU_BIN)"
        return
    fi
    mkdir -p "$WEIR_MACHINE_CACHE/logs"
    local lock="$WEIR_MACHINE_CACHE/tansu-$TANSU_VERSION.lock"
    local install_log="$WEIR_MACHINE_CACHE/logs/tansu-install.log"
    # One build per machine: concurrent setups (parallel CI clones) wait here.
    exec 9>"$lock"
    if ! flock -n 9; then
        log "broker: another setup is building tansu; waiting for it (log: $install_log)"
        flock 9
    fi
    local pids waited=0
    while pids="$(other_tansu_installs)"; [[ -n "$pids" ]]; do
        ((waited % 60 == 0)) && log "broker: waiting for running 'cargo install tansu' (pid ${pids//$'\n'/ }, ${waited}s; log: $install_log)"
        sleep 10
        waited=$((waited + 10))
    done
    if tansu_ok; then
        log "broker: tansu $TANSU_VERSION present ($TANSU_BIN)"
        flock -u 9
        return
    fi
    local build_dir="$WEIR_MACHINE_CACHE/build/tansu-$TANSU_VERSION"
    log "broker: building tansu $TANSU_VERSION with cargo install (~10 min on 2 cores; log: $install_log)"
    local start=$SECONDS
    # A persistent target dir lets an interrupted build resume; it is removed
    # once the binary is installed.
    if ! cargo install tansu --version "$TANSU_VERSION" --locked --features "$TANSU_FEATURES" \
        --root "$TANSU_ROOT" --target-dir "$build_dir" >"$install_log" 2>&1; then
        tail -n 40 "$install_log" >&2
        die "cargo install tansu failed (full log: $install_log)"
    fi
    rm -rf "$build_dir"
    tansu_ok || die "tansu installed but $TANSU_BIN does not run"
    log "broker: tansu $TANSU_VERSION installed in $((SECONDS - start))s ($TANSU_BIN)"
    flock -u 9
}

main() {
    parse_args "$@"
    local start=$SECONDS
    mkdir -p "$CACHE_DIR"
    if ((do_apt)); then ensure_apt_packages; fi
    ensure_rust_toolchain
    if ((do_ort)); then ensure_onnxruntime; fi
    if ((do_venv)); then ensure_venv; fi
    if ((do_broker)); then ensure_tansu; fi
    log "done in $((SECONDS - start))s"
}

main "$@"
