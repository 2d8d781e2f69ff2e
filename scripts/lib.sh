# Shared set-up for scripts/demo, scripts/test and scripts/bench. Source it.
# Creates the virtual environments and installs PostgreSQL when missing.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PIP_FLAGS=(-q --disable-pip-version-check)

log() { printf '\n== %s\n' "$*" >&2; }

# on_exit COMMAND: run COMMAND when the script exits, after those given before it.
ON_EXIT=()
run_on_exit() {
    local command
    for command in "${ON_EXIT[@]}"; do eval "$command" || true; done
}
on_exit() {
    ON_EXIT+=("$1")
    trap run_on_exit EXIT
}

# find_python MIN_MINOR: the first Python 3.x with x >= MIN_MINOR on PATH or under pyenv.
find_python() {
    local min=$1 candidate
    for candidate in python3 python3.13 python3.12 python3.11 \
        "$(pyenv root 2>/dev/null)"/versions/3.1[1-9]*/bin/python \
        "$HOME"/.pyenv/versions/3.1[1-9]*/bin/python; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c "import sys; sys.exit(sys.version_info < (3, $min))" 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

# require_python MIN_MINOR WHAT [HINT...]: find_python, or say on stderr that WHAT needs that
# Python and none was found (then HINT), and fail. Call it as
# `python=$(require_python 11 "Django 5.2") || exit 2`: a failure inside $(...) stops nothing.
require_python() {
    local min=$1 what=$2 hint="${*:3}"
    if find_python "$min"; then
        return 0
    fi
    echo "scripts/${0##*/}: $what needs Python 3.$min or newer, and none was found (tried python3," \
        "python3.13, python3.12, python3.11 on PATH and pyenv's versions).${hint:+ $hint}" >&2
    return 1
}

# ensure_venv DIR PYTHON DJANGO_SPEC: a venv with the project, its test extras and that Django.
ensure_venv() {
    local dir=$1 python=$2 django=$3 stamp
    stamp="$(cat "$ROOT/pyproject.toml" | sha1sum | cut -c1-12) $django"
    if [ -x "$dir/bin/python" ] && [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$stamp" ]; then
        return 0
    fi
    log "setting up $dir ($django, $("$python" --version))"
    rm -rf "$dir"
    "$python" -m venv "$dir"
    local pip_log="$dir/pip-install.log"
    if ! { "$dir/bin/pip" install "${PIP_FLAGS[@]}" --upgrade pip &&
        "$dir/bin/pip" install "${PIP_FLAGS[@]}" -e "$ROOT[test]" "$django"; } >"$pip_log" 2>&1; then
        cat "$pip_log" >&2
        echo "installing into $dir failed" >&2
        return 1
    fi
    echo "$stamp" >"$dir/.stamp"
}

apt_install() {
    if [ "$(id -u)" != 0 ]; then
        echo "need $* from Debian's packages; run as root or install them" >&2
        return 1
    fi
    if [ -z "${APT_UPDATED:-}" ]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

ensure_postgres() {
    if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 && ! command -v pg_ctl >/dev/null; then
        log "installing PostgreSQL"
        apt_install postgresql postgresql-contrib
    fi
}

# ensure_pgbouncer: Debian's PgBouncer, which the LISTEN tests run in transaction mode.
ensure_pgbouncer() {
    if ! command -v pgbouncer >/dev/null && [ ! -x /usr/sbin/pgbouncer ]; then
        log "installing PgBouncer"
        apt_install pgbouncer
    fi
}

# ensure_hosts_tools: what the tests of hosts apart need (tests/support/hosts.py): iproute2 for the
# network namespaces, libfaketime for a host whose clock runs fast. Only as root, where the
# namespaces can be made; elsewhere those tests skip and say why.
ensure_hosts_tools() {
    [ "$(id -u)" = 0 ] || return 0
    if ! command -v ip >/dev/null; then
        log "installing iproute2"
        apt_install iproute2
    fi
    if ! ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1; then
        log "installing libfaketime"
        apt_install libfaketime
    fi
}

# ensure_mariadb: Debian's MariaDB server, and the client library mysqlclient builds against.
ensure_mariadb() {
    if ! command -v mariadbd >/dev/null && [ ! -x /usr/sbin/mariadbd ]; then
        log "installing MariaDB"
        apt_install mariadb-server
    fi
    if ! pkg-config --exists libmariadb 2>/dev/null; then
        log "installing MariaDB's client library"
        apt_install libmariadb-dev pkg-config gcc
    fi
}

# ensure_mysqlclient DIR: the [mysql] extra (mysqlclient) in the venv DIR.
ensure_mysqlclient() {
    local dir=$1
    "$dir/bin/python" -c "import MySQLdb" 2>/dev/null && return 0
    if ! "$dir/bin/pip" install "${PIP_FLAGS[@]}" -e "$ROOT[mysql]" >"$dir/pip-mysql.log" 2>&1; then
        cat "$dir/pip-mysql.log" >&2
        echo "installing mysqlclient into $dir failed" >&2
        return 1
    fi
}

# start_mariadb: a private server on 127.0.0.1; sets MARIADB_DIR and MARIADB_URL (and
# JOBS_TEST_MARIADB_DIR); stops on exit.
start_mariadb() {
    MARIADB_DIR="$(mktemp -d /tmp/django-jobs-mariadb.XXXXXX)"
    MARIADB_URL="$(python3 "$ROOT/scripts/mariadbserver.py" start "$MARIADB_DIR")"
    # This server's directory, now: a script may start more than one.
    on_exit "python3 '$ROOT/scripts/mariadbserver.py' stop '$MARIADB_DIR'; rm -rf '$MARIADB_DIR'"
    JOBS_TEST_MARIADB_DIR=$MARIADB_DIR  # the fault tests stop and start this server
    export MARIADB_DIR MARIADB_URL JOBS_TEST_MARIADB_DIR
}

# start_postgres: a private server on 127.0.0.1; sets PG_DIR and PG_URL; stops on exit.
start_postgres() {
    PG_DIR="$(mktemp -d /tmp/django-jobs-pg.XXXXXX)"
    PG_URL="$(python3 "$ROOT/scripts/pgserver.py" start "$PG_DIR")"
    # This server's directory, now: a script may start more than one.
    on_exit "python3 '$ROOT/scripts/pgserver.py' stop '$PG_DIR'; rm -rf '$PG_DIR'"
    JOBS_TEST_PG_DIR=$PG_DIR  # the fault tests stop and start this server
    export PG_DIR PG_URL JOBS_TEST_PG_DIR
}

# start_pgbouncer URL: a private PgBouncer in transaction mode in front of the server of
# URL; sets PGBOUNCER_DIR and PGBOUNCER_URL (URL, pooled); stops on exit.
start_pgbouncer() {
    PGBOUNCER_DIR="$(mktemp -d /tmp/django-jobs-pgbouncer.XXXXXX)"
    PGBOUNCER_URL="$(python3 "$ROOT/scripts/pgbouncer.py" start "$PGBOUNCER_DIR" "$1")"
    on_exit "python3 '$ROOT/scripts/pgbouncer.py' stop '$PGBOUNCER_DIR'; rm -rf '$PGBOUNCER_DIR'"
    export PGBOUNCER_DIR PGBOUNCER_URL
}

# ensure_chromium: Debian's Chromium at /usr/bin/chromium, which the browser tests
# drive through Playwright (never `playwright install`: it downloads its own browsers).
ensure_chromium() {
    if [ ! -x /usr/bin/chromium ]; then
        log "installing Chromium"
        apt_install chromium
    fi
}
