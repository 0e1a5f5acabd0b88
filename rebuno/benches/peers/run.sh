#!/usr/bin/env bash
# The peer comparison (README.md beside this file): installs Restate (server and TypeScript SDK,
# from npm) and DBOS (from PyPI) under target/peers/, starts Debian's PostgreSQL through
# .ci/postgres, runs the same workload on each system and on ours (embedded SQLite, and
# `rebuno dev` + HTTP), and prints one Markdown table with the ratios. Not run by CI.
#
#   bash rebuno/benches/peers/run.sh            # everything
#   PEERS="rebuno restate" bash rebuno/benches/peers/run.sh
#
# Every result line and log goes to target/peers/results-<time>.txt. A system whose install or
# run fails is reported with the failing command's output, and the others still run.
set -uo pipefail
cd "$(dirname "$0")/../../.."
root="$PWD"
here="$root/rebuno/benches/peers"
out="$root/target/peers"
mkdir -p "$out"
results="$out/results-$(date -u +%Y%m%dT%H%M%SZ).txt"
: >"$results"
peers="${PEERS:-rebuno restate dbos}"

RESTATE_SERVER_VERSION="${RESTATE_SERVER_VERSION:-1.7.12}"
RESTATE_SDK_VERSION="${RESTATE_SDK_VERSION:-1.17.2}"
DBOS_VERSION="${DBOS_VERSION:-3.4.0}"
# The Restate SDK needs Node 22 or later; an older system Node is replaced by npm's
# node-linux-<arch> package of this version, installed under target/peers/node.
NODE_VERSION="${NODE_VERSION:-22.23.5}"

say() { echo "== $*" >&2; }
fail() { say "$1 FAILED: $2"; echo "FAILED $1: $2" >>"$results"; }
wants() { [[ " $peers " == *" $1 "* ]]; }
# The export of the test cluster's URL: one already listening on the port (another checkout's
# .ci/postgres, say), else the one .ci/postgres starts.
postgres_env() {
  local port="${PGPORT_TEST:-54329}"
  if pg_isready -q -h 127.0.0.1 -p "$port"; then
    echo "export REBUNO_TEST_PG_URL='postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable'"
  else
    bash .ci/postgres
  fi
}

machine="$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r)"
echo "MACHINE $machine" >>"$results"
echo "DATE $(date -u +%Y-%m-%d)" >>"$results"

# --- ours -------------------------------------------------------------------------------------
if wants rebuno; then
  say "rebuno: cargo bench --bench workflow"
  if CARGO_INCREMENTAL=0 cargo bench -p rebuno-cli --bench workflow >"$out/rebuno.log" 2>&1; then
    grep '^RESULT ' "$out/rebuno.log" >>"$results"
    printf 'DURABILITY rebuno embedded (SQLite)\tSQLite WAL, fdatasync before every acknowledged commit (group commit)\n' >>"$results"
    printf 'DURABILITY rebuno dev + HTTP (SQLite)\tthe same, kernel in its own process\n' >>"$results"
  else
    fail rebuno "$(tail -20 "$out/rebuno.log")"
  fi
fi

# --- Restate ----------------------------------------------------------------------------------
if wants restate; then
  rdir="$out/restate"
  mkdir -p "$rdir"
  say "Restate: npm install @restatedev/restate-server@$RESTATE_SERVER_VERSION @restatedev/restate-sdk@$RESTATE_SDK_VERSION"
  [ -f "$rdir/package.json" ] || echo '{"name":"peers-restate","private":true,"type":"module"}' >"$rdir/package.json"
  if ! (cd "$rdir" && npm install --no-audit --no-fund \
      "@restatedev/restate-server@$RESTATE_SERVER_VERSION" \
      "@restatedev/restate-sdk@$RESTATE_SDK_VERSION") >"$rdir/install.log" 2>&1; then
    fail Restate "npm install: $(tail -20 "$rdir/install.log")"
  else
    server="$(ls "$rdir"/node_modules/@restatedev/restate-server-*/bin/restate-server 2>/dev/null | head -1)"
    node=node
    if [ "$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -lt 22 ]; then
      arch="$(uname -m | sed 's/x86_64/x64/; s/aarch64/arm64/')"
      say "Restate: the SDK needs Node >= 22: npm install node-linux-$arch@$NODE_VERSION"
      mkdir -p "$out/node"
      [ -f "$out/node/package.json" ] || echo '{"name":"peers-node","private":true}' >"$out/node/package.json"
      (cd "$out/node" && npm install --no-audit --no-fund "node-linux-$arch@$NODE_VERSION") >"$out/node/install.log" 2>&1
      node="$out/node/node_modules/node-linux-$arch/bin/node"
    fi
    if ! "$node" --version >/dev/null 2>&1; then
      fail Restate "no Node >= 22 (npm install node-linux-*@$NODE_VERSION: $(tail -5 "$out/node/install.log" 2>/dev/null))"
    elif [ -z "$server" ]; then
      fail Restate "npm installed no restate-server binary for this platform"
    else
      rm -rf "$rdir/data"
      # Defaults (the development profile), as a user starts it: the replicated loglet on this
      # node's log-server, its RocksDB WAL fsynced before an append is acknowledged.
      RESTATE_DISABLE_TELEMETRY=true "$server" --base-dir "$rdir/data" --no-logo \
        >"$rdir/server.log" 2>&1 &
      spid=$!
      cp "$here/restate_workload.mjs" "$rdir/workload.mjs"
      say "Restate: workload"
      if (cd "$rdir" && "$node" workload.mjs) >"$rdir/workload.log" 2>&1; then
        grep '^RESULT ' "$rdir/workload.log" >>"$results"
        wal_fsync="$("$server" --dump-config 2>/dev/null | grep -c '^rocksdb-disable-wal-fsync = false')"
        printf 'DURABILITY Restate\tRestate %s defaults (TypeScript SDK %s, Node %s): replicated loglet, RocksDB WAL fsync on (rocksdb-disable-wal-fsync = false in %s sections)\n' \
          "$RESTATE_SERVER_VERSION" "$RESTATE_SDK_VERSION" "$("$node" --version)" "$wal_fsync" >>"$results"
      else
        fail Restate "$(tail -20 "$rdir/workload.log")"
      fi
      kill "$spid" 2>/dev/null
      wait "$spid" 2>/dev/null
    fi
  fi
fi

# --- DBOS -------------------------------------------------------------------------------------
if wants dbos; then
  ddir="$out/dbos"
  mkdir -p "$ddir"
  say "DBOS: pip install dbos==$DBOS_VERSION (venv in $ddir/venv)"
  if ! { [ -x "$ddir/venv/bin/python" ] || python3 -m venv "$ddir/venv"; } >"$ddir/install.log" 2>&1 ||
     ! "$ddir/venv/bin/pip" install -q "dbos==$DBOS_VERSION" >>"$ddir/install.log" 2>&1; then
    fail DBOS "pip install: $(tail -20 "$ddir/install.log")"
  elif ! pg="$(postgres_env 2>"$ddir/postgres.log")"; then
    fail DBOS "PostgreSQL: $(tail -20 "$ddir/postgres.log")"
  else
    eval "$pg"
    base="${REBUNO_TEST_PG_URL%%\?*}"
    base="${base%/*}"
    psql "$REBUNO_TEST_PG_URL" -qc 'DROP DATABASE IF EXISTS dbos_peers' >/dev/null 2>&1
    psql "$REBUNO_TEST_PG_URL" -qc 'CREATE DATABASE dbos_peers' >/dev/null
    settings="$(psql "$REBUNO_TEST_PG_URL" -Atc "SELECT 'PostgreSQL ' || current_setting('server_version') || ', fsync=' || current_setting('fsync') || ', synchronous_commit=' || current_setting('synchronous_commit')")"
    say "DBOS: workload"
    if DBOS_DATABASE_URL="$base/dbos_peers?sslmode=disable" "$ddir/venv/bin/python" "$here/dbos_workload.py" \
        >"$ddir/workload.log" 2>&1; then
      grep '^RESULT ' "$ddir/workload.log" >>"$results"
      printf 'DURABILITY DBOS\tDBOS %s (Python), %s\n' "$DBOS_VERSION" "$settings" >>"$results"
    else
      fail DBOS "$(tail -20 "$ddir/workload.log")"
    fi
  fi
fi

say "results in $results"
grep -E '^(MACHINE|DATE|FAILED)' "$results" >&2
python3 "$here/table.py" "$results"
