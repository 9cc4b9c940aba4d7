#!/usr/bin/env bash
# Sets up everything subs needs on a fresh Debian/Ubuntu machine, then runs
# the demo (`./dev.sh demo`) or the checks and tests (`./dev.sh test [pytest args]`:
# ruff, mypy --strict, then pytest on embedded Firebird 5 and the Firebird 3
# server; without arguments, then every database test once more on embedded Firebird 4).
set -euo pipefail
cd "$(dirname "$0")"

usage() { echo "usage: ./dev.sh demo | ./dev.sh test [pytest arguments]" >&2; exit 2; }
[ $# -ge 1 ] || usage
command=$1
shift

# libtommath1: needed by the embedded Firebird 5 engine (firebird-embedded).
# firebird3.0-server: the real Firebird 3 server the tests also run against.
# nats-server: the real NATS (JetStream) server of the relay's tests.
# chromium, chromium-driver: the real browser of the console's tests (Selenium).
packages=(libtommath1)
[ "$command" = test ] && packages+=(firebird3.0-server nats-server chromium chromium-driver)
python3 -c 'import ensurepip, venv' 2>/dev/null || packages+=(python3-venv)

missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    echo "installing Debian packages: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,web]'

FB4_WHEEL=4.0.7.4

case "$command" in
    demo) exec .venv/bin/subs demo "$@" ;;
    test)
        .venv/bin/ruff check subscriptions plugins tests benchmarks docs
        .venv/bin/ruff format --check subscriptions plugins tests benchmarks docs
        .venv/bin/mypy
        # The Firebird 4 wheel, kept apart: the second pass below runs on it,
        # and a test of the first pass opens a database with both engines.
        [ -d .engines/fb4/firebird ] || .venv/bin/python -m pip install -q --disable-pip-version-check \
            --no-deps --target .engines/fb4 "firebird-embedded==$FB4_WHEEL"
        # Two test processes (pytest-xdist): the tests mostly wait on listeners,
        # leases and servers (one process keeps about 60 % of a core busy).
        .venv/bin/python -m pytest -n 2 "$@"
        if [ $# -eq 0 ]; then
            # Every database test once more on embedded Firebird 4: its wheel
            # comes first on the path (an absolute one: subprocesses
            # of the tests run elsewhere, and a relative path would give them
            # Firebird 5, whose lock table then clashes with 4's on one file),
            # and the embedded engine's tests are then named fb4.
            PYTHONPATH="$PWD/.engines/fb4" .venv/bin/python -m pytest -n 2 -k fb4
        fi ;;
    *) usage ;;
esac
