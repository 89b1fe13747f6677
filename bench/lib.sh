# Shared by the bench scripts (sourced): how each contender is configured, so every
# harness runs them the same way. Expects ROOT, W (work dir), B (bootstrap), RUN, DB.

SQL() { mariadb --defaults-file="$ROOT/.local/mariadb/my.cnf" -uroot "$@"; }
log() { printf '[%s %s] %s\n' "$(basename "$0")" "$(date +%T)" "$*" >&2; }
# A harness that fails half-way must not leave a contender (Connect, a router) running
# into the next run: stop every background job on exit.
trap 'pids=$(jobs -p); if [ -n "$pids" ]; then kill $pids 2>/dev/null || true; fi' EXIT

# Creates the outbox table the benchmarks write to.
create_outbox() {
  SQL -e "CREATE DATABASE $DB; CREATE TABLE $DB.outbox (
    event_id VARCHAR(64) PRIMARY KEY, aggregate_type VARCHAR(64) NOT NULL, aggregate_id VARCHAR(64) NOT NULL,
    event_type VARCHAR(64) NOT NULL, payload LONGTEXT NOT NULL, created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))"
}

# Creates a prefix's topics Type0..Type<n-1> up front (broker default: 3 partitions) and
# writes one record to every partition, so contenders measure streaming, not topic
# creation: the first writes to a brand-new partition are slow (a 1M backlog took 14.5 s
# into new topics and 7.6 s into the same topics once warm).
create_topics() {
  local prefix=$1 n=$2
  for t in $(seq 0 $((n - 1))); do
    {
      # Bounded: a broker that cannot create the topic (it once ran out of open files)
      # left kcat waiting forever, and the bench with it.
      timeout 30 kcat -b "$B" -L -t "$prefix.Type$t" >/dev/null 2>&1 || true
      for p in 0 1 2; do echo warm | timeout 30 kcat -b "$B" -P -t "$prefix.Type$t" -p $p >/dev/null 2>&1 || true; done
    } &
    [ $((t % 10)) -eq 9 ] && wait
  done
  wait
}

# Creates a prefix's topics (100, or "$2") and writes $BENCH_WARM (300,000) records of the
# benchmark's shape into them: a partition's first megabytes go in markedly slower than
# later ones (a 1M backlog took 8.4 s into partitions holding one record each, 6.2-6.4 s
# once they held a few hundred kB), and every contender should meet the same broker
# state. The producer's first records create the topics, all at once (one kcat per topic
# took 12 s for 100).
warm_topics() {
  local types=${2:-100}
  "$ROOT/target/release/examples/produce" --prefix "$1" --count "${BENCH_WARM:-300000}" --topics "$types" >/dev/null
}

# Prints the SQL that writes the benchmarks' backlog: "$1" outbox events of ≈200 bytes,
# "$2" aggregate types (default 100), 10,000 aggregate ids, in transactions of 1–1000 rows.
write_backlog() {
  local n=$1 types=${2:-100} s=1 i=0 size e
  local sizes=(1 10 100 1000 50 500 5 200 20 700)
  while [ $s -le "$n" ]; do
    size=${sizes[$((i % ${#sizes[@]}))]}; e=$((s + size - 1)); [ $e -gt "$n" ] && e=$n
    echo "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload) SELECT CONCAT('$RUN-', seq), CONCAT('Type', seq % $types), CONCAT('agg-', seq % 10000), 'Created', CONCAT('{\"seq\":', seq, ',\"pad\":\"', REPEAT('x', 160), '\"}') FROM seq_${s}_to_${e};"
    s=$((e + 1)); i=$((i + 1))
  done
}

# Fetches Debezium and the Kafka Connect runtime from Maven, again whenever the pom changes.
DBZ=$ROOT/.local/debezium/libs
fetch_debezium() {
  local pom=$ROOT/bench/debezium/pom.xml want
  want=$(sha256sum "$pom" | cut -c1-16)
  if [ "$(cat "$DBZ/.complete" 2>/dev/null)" != "$want" ]; then
    log "fetching Debezium + Kafka Connect jars"
    rm -rf "$DBZ"
    timeout 900 mvn -q -B -f "$pom" dependency:copy-dependencies -DoutputDirectory="$DBZ" >"$W/mvn.log" 2>&1 ||
      { log "Maven could not fetch Debezium; see $W/mvn.log"; tail -20 "$W/mvn.log" >&2; return 1; }
    echo "$want" > "$DBZ/.complete"
  fi
}

# Seconds to wait for "$1" records before calling a contender stuck: generous for the
# slowest one (Debezium, about 12,000 events/s here), bounded so a stuck run fails
# within minutes instead of holding CI to its limit.
await_secs() { echo $((120 + $1 / 2000)); }

# Prints what Connect says of the connector (its task's trace when it failed) and the
# end of its log, after a Debezium run did not deliver.
debezium_explain() {
  log "Debezium did not deliver; connector status:"
  curl -s --max-time 5 "127.0.0.1:8083/connectors/outbox-$RUN/status" >&2 || log "(Connect's REST API does not answer)"
  echo >&2
  log "the end of its log ($1):"
  tail -40 "$1" >&2
}

# Writes Connect standalone + Debezium MariaDB connector + EventRouter configs routing
# to "$1.Type<n>", and sets CONNECT to the command that runs it.
debezium_config() {
  local prefix=$1
  # Debezium is on the classpath. An empty plugin.path makes Connect scan the working
  # directory, the checkout with target/ and .local/: 20–40 s here at every start, and
  # more the more the checkout holds.
  mkdir -p "$W/plugins"
  cat > "$W/worker.properties" <<P
bootstrap.servers=$B
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.storage.StringConverter
offset.storage.file.filename=$W/connect.offsets
offset.flush.interval.ms=1000
listeners=http://127.0.0.1:8083
plugin.path=$W/plugins
P
  cat > "$W/connector.properties" <<P
name=outbox-$RUN
connector.class=io.debezium.connector.mariadb.MariaDbConnector
tasks.max=1
database.hostname=127.0.0.1
database.port=3307
database.user=app
database.password=app-secret
database.server.id=$((RUN % 100000 + 200000))
topic.prefix=dbz$RUN
database.include.list=$DB
table.include.list=$DB.outbox
snapshot.mode=no_data
include.schema.changes=false
schema.history.internal.kafka.bootstrap.servers=$B
schema.history.internal.kafka.topic=dbz-history-$RUN
schema.history.internal.store.only.captured.databases.ddl=true
schema.history.internal.store.only.captured.tables.ddl=true
heartbeat.interval.ms=1000
transforms=outbox
transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
transforms.outbox.table.field.event.id=event_id
transforms.outbox.table.field.event.key=aggregate_id
transforms.outbox.route.by.field=aggregate_type
transforms.outbox.route.topic.replacement=$prefix.\${routedByValue}
P
  cat > "$W/log4j2.properties" <<'P'
rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = STDERR
appender.stderr.type = Console
appender.stderr.name = STDERR
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = [%d] %p %m (%c)%n
P
  CONNECT=(java -Xms256m -Xmx2g -Dlog4j2.configurationFile="$W/log4j2.properties" -cp "$DBZ/*"
    org.apache.kafka.connect.cli.ConnectStandalone "$W/worker.properties" "$W/connector.properties")
}

# Waits (up to 120 s) until the Debezium connector and its task report RUNNING.
debezium_running() {
  for _ in $(seq 1 120); do
    curl -s --max-time 2 "127.0.0.1:8083/connectors/outbox-$RUN/status" 2>/dev/null |
      grep -q '"state":"RUNNING".*"tasks":\[{"id":0,"state":"RUNNING"' && return 0
    sleep 1
  done
  log "Debezium did not reach RUNNING; see $W"
  return 1
}

# Writes the outbox-router config routing to "$1.Type<n>" from binlog position "$2"
# (or "latest"), with its metrics on "$3" (or "off"); ROUTER_EXTRA_TOML is appended and
# CHECKPOINT_FLUSH_MS sets the checkpoint interval (to try settings).
router_config() {
  local prefix=$1 start=$2 listen=${3:-off}
  cat <<T
[source]
host = "127.0.0.1"
port = 3307
user = "cdc"
password = "\${env:OUTBOX_DB_PASSWORD}"
server_id = $((RUN % 100000 + 300000))
start = "$start"
[outbox]
tables = ["$DB.outbox"]
[outbox.columns]
event_id = "event_id"
aggregate_type = "aggregate_type"
aggregate_id = "aggregate_id"
event_type = "event_type"
payload = "payload"
[route]
topic = "$prefix.\${routedByValue}"
[kafka]
bootstrap_servers = "$B"
[checkpoint]
dir = "$W/checkpoint"
flush_interval_ms = ${CHECKPOINT_FLUSH_MS:-500}
[monitor]
listen = "$listen"
${ROUTER_EXTRA_TOML:-}
T
}

# Runs Debezium until it has stored a binlog offset (with snapshot.mode=no_data it starts
# from the current position), then stops it, so a later run reads everything after.
# Debezium only commits an offset after it has seen an event: keep some unrelated
# binlog traffic going meanwhile.
debezium_prime() {
  "${CONNECT[@]}" > "$W/prime.log" 2>&1 &
  local pid=$!
  debezium_running || { kill $pid; return 1; }
  SQL -e "CREATE TABLE IF NOT EXISTS $DB.tick (n INT)"
  for _ in $(seq 1 120); do
    [ -s "$W/connect.offsets" ] && break
    SQL -e "INSERT INTO $DB.tick VALUES (1)"
    sleep 1
  done
  finish $pid
  [ -s "$W/connect.offsets" ] || { log "Debezium stored no offset; see $W/prime.log"; return 1; }
}

# Waits (up to 2 minutes) until InnoDB has written back the pages the backlog dirtied, so
# each contender starts on a quiet server instead of racing the flush of a million-row
# insert (whoever ran first paid for it).
settle() {
  local pct
  pct=$(SQL -N -e "SELECT @@GLOBAL.innodb_max_dirty_pages_pct")
  SQL -e "SET GLOBAL innodb_max_dirty_pages_pct = 0"
  # Up to 2 minutes; a smoke run, whose figures mean nothing, waits a few seconds
  # (after the test suite MariaDB holds many dirty pages, and a full wait per contender
  # cost CI minutes).
  for _ in $(seq 1 "${BENCH_SETTLE_TRIES:-240}"); do
    [ "$(SQL -N -e "SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'" | awk '{print $2}')" -lt 10 ] && break
    sleep 0.5
  done
  SQL -e "SET GLOBAL innodb_max_dirty_pages_pct = $pct"
}

# CPU seconds used so far by the Kafka broker and by MariaDB ("kafka mariadb"), to show
# where the machine's two cores went during a contender's run.
server_cpu() {
  local k m hz
  hz=$(getconf CLK_TCK)
  # The broker the benchmark talks to, by its pid file: with the 3-node cluster or a
  # test's private broker also running, "the first kafka.Kafka process" is another one
  # (it read 0.04 s for every contender once). Refuse to guess.
  k=$(cat "$ROOT/.local/kafka/kafka.pid" 2>/dev/null || true)
  m=$(cat "$ROOT/.local/mariadb/mariadb.pid" 2>/dev/null || true)
  if [ -z "$k" ] || ! grep -q 'kafka\.Kafka' "/proc/$k/cmdline" 2>/dev/null; then
    echo "server_cpu: cannot find the benchmark's broker (.local/kafka/kafka.pid); broker CPU not measured" >&2
    echo "nan nan"; return 0
  fi
  awk -v hz="$hz" '{printf "%.2f ", ($14 + $15) / hz}' "/proc/$k/stat"
  if [ -n "$m" ] && [ -r "/proc/$m/stat" ]; then
    awk -v hz="$hz" '{printf "%.2f\n", ($14 + $15) / hz}' "/proc/$m/stat"
  else
    echo nan
  fi
}

# Stops a contender started in the background as "$1" (time(1) wrapping it, or the
# process itself): SIGTERM, up to 60 s for it to end, then SIGKILL, so a contender that
# does not stop cannot hold the run.
finish() {
  local pid=$1 target
  target=$(pgrep -P "$pid" || true)
  target=${target:-$pid}
  kill -TERM "$target" 2>/dev/null || true
  for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    log "process $target did not stop within 60 s of SIGTERM; killing it"
    kill -KILL "$target" "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

# "$2 - $1" for server_cpu readings, "n/a" when either is not measured.
cpu_diff() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "nan" || b == "nan") print "n/a"; else printf "%.2f\n", b - a }'; }

# Prints "secs cpu rss_mb" from a /usr/bin/time -v report "$1" and the wall time "$2".
times() {
  local cpu rss
  cpu=$(awk -F': ' '/User time/ {u=$2} /System time/ {s=$2} END {print u+s}' "$1")
  rss=$(awk -F': ' '/Maximum resident/ {print int($2/1024)}' "$1")
  echo "$2 $cpu $rss"
}

# Waits until the router with metrics on port "$1" has acknowledged "$2" events; fails
# when process "$3" (the router, or the time(1) wrapping it) exits first, or when the
# count does not arrive within await_secs.
await_acked() { await_metric "$1" outbox_router_events_acked_total "$2" "$3" router; }

# Waits until the counter "$2" (summed over its labels) on port "$1"'s /metrics reaches
# "$3"; fails when process "$4" exits first or the count does not arrive within
# await_secs. "$5" names the contender in the messages.
await_metric() {
  local port=$1 metric=$2 n=$3 pid=$4 who=$5 count deadline
  deadline=$(($(date +%s) + $(await_secs "$n")))
  while :; do
    kill -0 "$pid" 2>/dev/null || { log "$who exited early"; return 1; }
    # The port is not open for the first polls: that is not a failure.
    count=$({ curl -s --max-time 2 "127.0.0.1:$port/metrics" 2>/dev/null || true; } |
      awk -v m="$metric" '$1 == m || index($1, m "{") == 1 {s += $NF} END {printf "%.0f\n", s}')
    [ "${count:-0}" -ge "$n" ] && return 0
    [ "$(date +%s)" -lt "$deadline" ] || { log "$who counted ${count:-0} of $n events within $(await_secs "$n") s"; return 1; }
    sleep 0.05
  done
}

# DeltaForge (bench/deltaforge/build) as its docs advise for its outbox processor
# (docs/src/outbox.md: raw payloads, the aggregate id as the key), the event id in an
# `id` header as the router's. Pipeline "$1" routes to "$2.<aggregate type>"; "$3" =
# exactly-once (true/false); "$4" the shape its docs/src/performance.md advises for:
# "drain" (default) for a backlog — batches of 16,000 events / 16 MB, 4 in flight,
# linger.ms 0 (BENCH_DF_LINGER_MS overrides; 5 is its sink's default) —, "steady" for
# latency — its defaults (2,000 events / 50 ms, 1 in flight, linger.ms 5). Schema sensing
# off either way. Prints the YAML.
deltaforge_config() {
  local name=$1 prefix=$2 eos=${3:-false} shape=${4:-drain}
  cat <<Y
apiVersion: deltaforge/v1
kind: Pipeline
metadata:
  name: $name
  tenant: bench
spec:
  source:
    type: mysql
    config:
      id: $name-mysql
      dsn: "mysql://cdc:cdc-secret@127.0.0.1:3307/$DB"
      tables: ["$DB.outbox"]
      outbox:
        tables: ["$DB.outbox"]
  processors:
    - type: outbox
      topic: "$prefix.\${aggregate_type}"
      raw_payload: true
      columns:
        event_id: event_id
      additional_headers:
        id: event_id
  sinks:
    - type: kafka
      config:
        id: $name-kafka
        brokers: "$B"
        topic: "$prefix.unrouted"
        required: true
        exactly_once: $eos
Y
  if [ "$shape" = drain ]; then
    cat <<Y
        client_conf:
          linger.ms: "${BENCH_DF_LINGER_MS:-0}"
  batch:
    max_events: 16000
    max_bytes: 16777216
    max_ms: 100
    max_inflight: 4
Y
  fi
  cat <<Y
  schema_sensing:
    enabled: false
Y
}

# DeltaForge's command line for config "$1" and store "$2" after the binary, its API on
# loopback. Its metrics listener is not configurable: 0.0.0.0:9000 whatever
# --metrics-addr says (crates/runner/src/main.rs), so one DeltaForge runs at a time.
DF_METRICS_PORT=9000
DF_API=127.0.0.1:18080
deltaforge_args() { echo --config "$1" --api-addr $DF_API --metrics-addr 127.0.0.1:$DF_METRICS_PORT --storage-path "$2"; }

# The cached DeltaForge binary (bench/deltaforge/build), or nothing (and a log line saying
# it is left out): a harness runs DeltaForge only where it was built (CI never builds it),
# and not with BENCH_DELTAFORGE=0.
deltaforge_bin() {
  local bin=$ROOT/.local/deltaforge/bin/deltaforge-95b4d93
  if [ "${BENCH_DELTAFORGE:-1}" != 0 ] && [ -x "$bin" ]; then
    echo "$bin"
  else
    log "DeltaForge not built here (bench/deltaforge/build) or BENCH_DELTAFORGE=0: left out"
  fi
}

# Runs DeltaForge with config "$1" and store "$2" (its output in "$W/$3.*"), behind the
# command words of the array PIN when a harness sets it, until its own counter of
# delivered events reaches N: deltaforge_sink_events_total moves once a batch's send,
# commit_transaction included in exactly-once, has returned — as the router's runs are
# timed by their acknowledged count (end offsets would also count transaction markers).
# Prints "secs cpu rss_mb broker_cpu" (the broker's CPU up to the last count).
deltaforge_drain() {
  local config=$1 store=$2 name=$3 start end tpid k0 k1
  k0=$(server_cpu | awk '{print $1}')
  start=$(date +%s.%N)
  # shellcheck disable=SC2046 # deltaforge_args prints words
  ${PIN[@]+"${PIN[@]}"} /usr/bin/time -v -o "$W/$name.time" "$(deltaforge_bin)" $(deltaforge_args "$config" "$store") \
    > "$W/$name.out" 2> "$W/$name.log" &
  tpid=$!
  await_metric $DF_METRICS_PORT deltaforge_sink_events_total "$N" $tpid DeltaForge || { tail -20 "$W/$name.log" >&2; return 1; }
  end=$(date +%s.%N)
  k1=$(server_cpu | awk '{print $1}')
  finish $tpid
  echo "$(times "$W/$name.time" "$(echo "$end - $start" | bc -l)") $(cpu_diff "$k0" "$k1")"
}

# Gives DeltaForge's store "$1" the start position "$2" (FILE) "$3" (POS) for each source
# id after them. Its first start resolves the binlog's tail and, on MariaDB, never
# returns (after SHOW BINARY LOG STATUS fails it asks SHOW MASTER STATUS, then awaits its
# pool's disconnect while still holding the connection: mysql_helpers.rs,
# resolve_binlog_tail); a stored position skips that path, as a restart does. The store
# is created by starting DeltaForge without pipelines for two seconds.
deltaforge_seed() {
  local store=$1 file=$2 pos=$3 bin; shift 3
  bin=$(deltaforge_bin)
  (cd "$W" && exec "$bin" --api-addr $DF_API --metrics-addr 127.0.0.1:$DF_METRICS_PORT --storage-path "$store") > "$W/df-seed.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 50); do [ -s "$store" ] && sqlite3 "$store" 'SELECT 1 FROM df_kv LIMIT 1' >/dev/null 2>&1 && break; sleep 0.2; done
  finish $pid
  for id in "$@"; do
    sqlite3 "$store" "INSERT INTO df_kv (ns, key, val) VALUES ('checkpoints', '$id', CAST('{\"file\":\"$file\",\"pos\":$pos,\"gtid_set\":null}' AS BLOB))"
  done
}

# Waits (up to 60 s) until DeltaForge, process "$1", reports every pipeline running on its
# API (/ready lists each pipeline's status).
deltaforge_running() {
  local pid=$1 ready
  for _ in $(seq 1 120); do
    kill -0 "$pid" 2>/dev/null || { log "DeltaForge exited early"; return 1; }
    ready=$(curl -s --max-time 2 "$DF_API/ready" 2>/dev/null || true)
    if echo "$ready" | grep -q '"status":"running"' && ! echo "$ready" | grep -qE '"status":"(starting|failed|paused|stopped)"'; then
      return 0
    fi
    sleep 0.5
  done
  log "DeltaForge did not report its pipelines running within 60 s: $ready"; return 1
}

# Compares two prefixes' records of this run (id header "$RUN-…") record for record:
# topic (after the prefix), key, id header, value. Prints one line of counts.
same_records() {
  local ours=$1 theirs=$2 types=${3:-100}
  local t
  for p in "$ours" "$theirs"; do
    for t in $(seq 0 $((types - 1))); do
      timeout 300 kcat -b "$B" -C -t "$p.Type$t" -o beginning -e -X isolation.level=read_committed \
        -f "Type$t\t%k\t%h\t%s\n" 2>/dev/null
    done > "$W/records.$p"
  done
  python3 - "$W/records.$ours" "$W/records.$theirs" "$RUN" <<'PY'
import sys
def read(path, run):
    out = {}
    for line in open(path, encoding="utf-8", errors="replace"):
        topic, key, headers, value = line.rstrip("\n").split("\t", 3)
        hs = dict(h.split("=", 1) for h in headers.split(",") if "=" in h)
        eid = hs.get("id", "")
        if eid.startswith(run + "-"):
            out.setdefault(eid, []).append((topic, key, value))
    return out
ours, theirs = read(sys.argv[1], sys.argv[3]), read(sys.argv[2], sys.argv[3])
missing = sum(1 for e in ours if e not in theirs)
extra = sum(1 for e in theirs if e not in ours)
dups = sum(len(v) - 1 for v in theirs.values())
both = [e for e in ours if e in theirs]
route = sum(1 for e in both if ours[e][0][:2] == theirs[e][0][:2])
value = sum(1 for e in both if ours[e][0][2] == theirs[e][0][2])
sample = next((theirs[e][0][2][:60] for e in both if ours[e][0][2] != theirs[e][0][2]), "")
print(f"ours {len(ours)}, theirs {len(theirs)}: missing {missing}, extra {extra}, duplicates {dups}; "
      f"same topic and key {route}/{len(both)}; same value {value}/{len(both)}"
      + (f" (theirs e.g. {sample}…)" if sample else ""))
PY
}
