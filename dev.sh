#!/usr/bin/env bash
# Sets up everything subs needs on a fresh Debian/Ubuntu machine, then runs
# the demo (`./dev.sh demo`) or the checks and tests (`./dev.sh test [pytest args]`:
# ruff, mypy --strict, then pytest on embedded Firebird 5 and the Firebird 3
# server; without arguments, also the capture tests on embedded Firebird 4).
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
FB4_TESTS=(tests/test_capture.py tests/test_capture_types.py tests/test_capture_ddl.py tests/test_rights.py
           tests/test_schema.py tests/test_subscriptions_cli.py tests/test_bad_input.py tests/test_claims.py
           tests/test_listener.py tests/test_handler_pool.py tests/test_backfill.py tests/test_pause.py
           tests/test_housekeeping.py tests/test_repair.py tests/test_events.py tests/test_connection.py)

case "$command" in
    demo) exec .venv/bin/subs demo "$@" ;;
    test)
        .venv/bin/ruff check subscriptions plugins tests benchmarks docs
        .venv/bin/ruff format --check subscriptions plugins tests benchmarks docs
        .venv/bin/mypy
        # Two test processes (pytest-xdist): the tests mostly wait on listeners,
        # leases and servers (one process keeps about 60 % of a core busy).
        .venv/bin/python -m pytest -n 2 "$@"
        if [ $# -eq 0 ]; then
            # The capture, schema, claim and listener tests once more on
            # embedded Firebird 4: its wheel, kept apart, comes first on the path.
            [ -d .engines/fb4/firebird ] || .venv/bin/python -m pip install -q --disable-pip-version-check \
                --no-deps --target .engines/fb4 "firebird-embedded==$FB4_WHEEL"
            PYTHONPATH=.engines/fb4 .venv/bin/python -m pytest -n 2 -k fb4 "${FB4_TESTS[@]}"
        fi ;;
    *) usage ;;
esac
