//! The command line, as clap parses it.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "outbox-router",
    version,
    about = "Transactional outbox → Kafka, from the MySQL / MariaDB binlog"
)]
pub struct Cli {
    /// Configuration file (TOML).
    #[arg(
        short,
        long,
        env = "OUTBOX_ROUTER_CONFIG",
        default_value = "outbox-router.toml",
        global = true
    )]
    pub(crate) config: PathBuf,
    /// A pool's source (when --config is a pool file): the one an operator command acts on.
    #[arg(long, env = "OUTBOX_ROUTER_SOURCE", global = true, value_name = "NAME")]
    pub(crate) source: Option<String>,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Stream the binlog and publish outbox events until SIGINT/SIGTERM.
    Run {
        /// Where records go: kafka, or stdout (JSON lines) for a dry run.
        #[arg(long, value_enum, default_value_t = SinkArg::Kafka)]
        sink: SinkArg,
        /// Create the checkpoint store when it does not exist (a first start). Without
        /// it a missing store is an error: a lost volume must not start over silently.
        #[arg(long)]
        init: bool,
        /// Shadow mode: publish to the topics under route.shadow_prefix, with a checkpoint
        /// store of its own (<checkpoint.dir>-shadow), beside a polling relay that still
        /// publishes the live ones; compare with `reconcile --against-shadow`.
        #[arg(long)]
        shadow: bool,
    },
    /// Check server settings, privileges, outbox columns and Kafka; exit 1 on any problem.
    Validate,
    /// After a purge (exit code 3): re-publish outbox rows that may have committed after
    /// the checkpoint, with their original event ids, and move the checkpoint to now.
    Recover(RecoverArgs),
    /// Checkpoint, server position, lag, retention runway and a verdict; works whether the
    /// router runs or not. Exit 0 ok, 1 warning, 2 critical, 3 unknown.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Hours your alerting needs to notice a dead router (retention budget): a
        /// number of hours or a duration (1d 12h).
        #[arg(long, value_parser = parse_hours)]
        detect_hours: Option<f64>,
        /// Hours you need to repair it (retention budget), as --detect-hours.
        #[arg(long, value_parser = parse_hours)]
        repair_hours: Option<f64>,
    },
    /// Print an outbox-router config (TOML) made from a Debezium MySQL / MariaDB connector
    /// config (JSON as posted to Kafka Connect, or .properties); unmapped keys go to stderr.
    ///
    /// With --offsets, instead: read that connector's stored offset and write it as the
    /// router's first checkpoint (the config given with --config must be the imported
    /// one); it resumes at the start of the transaction Debezium was in.
    ImportDebezium {
        /// The connector config file.
        file: PathBuf,
        /// Kafka Connect's offset store: the standalone worker's offset file, or
        /// `kafka:TOPIC` for a distributed worker's offsets topic (on kafka.bootstrap_servers).
        #[arg(long, value_name = "FILE|kafka:TOPIC")]
        offsets: Option<String>,
        /// With --offsets: write the checkpoint even while XA branches are prepared on
        /// the server (the router stops at their XA COMMIT).
        #[arg(long, requires = "offsets")]
        ignore_prepared_xa: bool,
    },
    /// Delete outbox rows that are provably delivered (the durable checkpoint is past the
    /// snapshot they were selected in), in small primary-key-ordered batches; works while
    /// the router runs. Connects as ops.user. MariaDB only.
    Prune(PruneArgs),
    /// Publish chosen outbox rows again with their original event ids, keys and topics,
    /// plus a header naming the replay; throttled and written to the audit trail. Works
    /// while the router runs and leaves its checkpoint alone.
    Replay(ReplayArgs),
    /// Compare the outbox rows of a time window with what the routed topics hold, by
    /// event id: missing, duplicated, misrouted, not in the table. Exit 0 when nothing is
    /// missing or misrouted, 1 otherwise. MariaDB only.
    Reconcile(ReconcileArgs),
    /// Ordered parking (outbox.on_invalid = "park"): list what is parked, show an
    /// aggregate's parked events, release them once the cause is fixed, or drop them.
    Parked {
        #[command(subcommand)]
        action: ParkedAction,
    },
    /// List the audit trail: every replay and republish, who, when, why, how many.
    Audit {
        /// Print JSON lines (every entry, started and outcome).
        #[arg(long)]
        json: bool,
    },
    /// Inspect or change the stored checkpoint (stop the router first).
    Checkpoint {
        #[command(subcommand)]
        action: CheckpointAction,
    },
    /// Every source of the fleet — its leader, state, lag, runway, checkpoint — as any
    /// instance's console API gives it (/api/v1/fleet). A credential, when the monitor
    /// needs one, from OUTBOX_ROUTER_TOKEN. Exit 0 all running or paused, 1 some
    /// starting, stopped or unknown, 2 one failed, 3 no answer.
    Fleet {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Ask this monitor (https://router-0.example:9612) instead of the one the config
        /// names; no config needed then.
        #[arg(long)]
        url: Option<String>,
        /// PEM certificates to trust for --url over https (a private CA).
        #[arg(long, requires = "url")]
        ca_file: Option<PathBuf>,
    },
    /// Ask the running router's monitor endpoint for /health (or /ready with --ready):
    /// exit 0 when it answers 200, else 1. For container health checks, which have no
    /// curl: `HEALTHCHECK CMD ["outbox-router", "health"]`.
    Health {
        /// Ask /ready (streaming and delivering) instead of /health (alive).
        #[arg(long)]
        ready: bool,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell); no config
    /// needed, e.g. `outbox-router completions bash > /etc/bash_completion.d/outbox-router`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), generated from these definitions; no config needed,
    /// e.g. `outbox-router man > /usr/local/share/man/man1/outbox-router.1`.
    Man,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum SinkArg {
    Kafka,
    Stdout,
    /// Discard records (measures reading, mapping and routing alone); the checkpoint
    /// still advances, so only with a scratch checkpoint directory.
    Null,
}

#[derive(Subcommand)]
pub(crate) enum CheckpointAction {
    /// Print the stored position.
    Show {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Print it as a Debezium connector offset with this topic.prefix (the body of
        /// Kafka Connect's `PATCH /connectors/NAME/offsets`), to switch back.
        #[arg(long, value_name = "TOPIC_PREFIX")]
        debezium: Option<String>,
    },
    /// Store a position (FILE:OFFSET [gtid=D-S-N,...]); it must be a transaction boundary.
    Set {
        position: String,
        /// Move it even while XA branches are prepared on the server (their rows were
        /// logged before the new position; the router stops at their XA COMMIT).
        #[arg(long)]
        ignore_prepared_xa: bool,
    },
    /// Exactly-once, after `delivery.checkpoint_topic` changed name: carry the newest
    /// commit marker over from the old topic, committed on the current one for the
    /// whole fleet (the only way a fleet's markers move to another topic).
    MoveTopic {
        /// The checkpoint topic the markers were on.
        #[arg(long, value_name = "TOPIC")]
        from: String,
    },
    /// Create an empty checkpoint store for a first start (`run` refuses a missing one).
    Init,
    /// Remove the stored checkpoint. In at-least-once: the next run starts at source.start
    /// (events since the old position are skipped or sent again). In exactly-once: the
    /// commit marker on Kafka still holds the position and the next run resumes there;
    /// `checkpoint set` moves it.
    Reset {
        /// Confirm: events after the old position may be skipped or re-sent.
        #[arg(long)]
        yes: bool,
    },
}

/// `recover`'s flags.
#[derive(Args)]
pub(crate) struct RecoverArgs {
    /// DATETIME/TIMESTAMP column saying when a row was written
    /// [default: outbox.columns.timestamp, else created_at].
    #[arg(long)]
    pub(crate) timestamp_column: Option<String>,
    /// Slack before the checkpoint's commit time (clocks, time zones).
    #[arg(long, alias = "margin-secs", value_parser = crate::units::parse_secs_or_duration, default_value = "10m")]
    pub(crate) margin: Duration,
    /// The longest your transactions stay open: a row's timestamp is its INSERT's
    /// time, its COMMIT may come this much later.
    #[arg(long, alias = "longest-transaction-secs", value_parser = crate::units::parse_secs_or_duration, default_value = "1h")]
    pub(crate) longest_transaction: Duration,
    /// Re-publish rows written from this time on, instead of checkpoint − margins: unix
    /// seconds, RFC 3339 or a duration ago (2h), as `replay --since`.
    #[arg(long, value_parser = crate::units::parse_time)]
    pub(crate) since: Option<i64>,
    /// Count the rows that would be re-published; send nothing, keep the checkpoint.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Move the checkpoint even when no row is in the window.
    #[arg(long)]
    pub(crate) allow_empty: bool,
    /// Move the checkpoint even while XA branches are prepared on the server (their rows
    /// are not in the table read; the router stops at their XA COMMIT).
    #[arg(long)]
    pub(crate) ignore_prepared_xa: bool,
}

/// `prune`'s flags.
#[derive(Args)]
pub(crate) struct PruneArgs {
    /// Only rows older than this (e.g. 7d, 36h), by their timestamp column.
    #[arg(long, value_parser = crate::units::parse_secs_or_duration)]
    pub(crate) older_than: Duration,
    /// Rows per batch; each batch is one short transaction.
    #[arg(long, default_value_t = 1000)]
    pub(crate) batch: usize,
    /// Rows per second at most (pauses between batches).
    #[arg(long)]
    pub(crate) rate: Option<f64>,
    /// DATETIME/TIMESTAMP column saying when a row was written
    /// [default: outbox.columns.timestamp, else created_at].
    #[arg(long)]
    pub(crate) timestamp_column: Option<String>,
    /// Also keep rows written less than this before the checkpoint's commit time (clocks,
    /// time zones).
    #[arg(long, value_parser = crate::units::parse_secs_or_duration, default_value = "10m")]
    pub(crate) margin: Duration,
    /// How long a batch waits for the router's checkpoint to pass the rows it selected.
    #[arg(long, value_parser = crate::units::parse_secs_or_duration, default_value = "60s")]
    pub(crate) wait: Duration,
    /// Copy each batch into this table (DB.TABLE, or TABLE in the outbox's database) in
    /// the same transaction, before deleting it.
    #[arg(long, value_name = "TABLE")]
    pub(crate) archive: Option<String>,
    /// Count what would be deleted; delete nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Hours as a number (36, 0.5) or a duration (1d 12h).
fn parse_hours(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(h) if h >= 0.0 && h.is_finite() => Ok(h),
        Ok(_) => Err(format!("{s:?} is not a positive number of hours")),
        Err(_) => crate::units::parse_duration(s).map(|d| d.as_secs_f64() / 3600.0),
    }
}

/// `LOW..HIGH`.
fn parse_range(s: &str) -> Result<(String, String), String> {
    s.split_once("..")
        .map(|(l, h)| (l.to_string(), h.to_string()))
        .ok_or_else(|| format!("{s:?} is not a range: give LOW..HIGH"))
}

#[derive(Subcommand)]
pub(crate) enum ParkedAction {
    /// One line per parked aggregate: its events, the oldest one's age, why it is parked.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// The parked events of aggregates, in their order.
    Show {
        #[command(flatten)]
        which: AggregateArgs,
        /// Print JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Re-publish the parked events of aggregates to their topics, in their original
    /// order with their original ids (each row read again from its table: a fixed row
    /// goes out fixed), then un-park them. Carried out by the source's leader between two
    /// binlog transactions; audited. Exit 0 when released, 1 when refused or not answered
    /// within --wait.
    Release(ParkedRequestArgs),
    /// Un-park aggregates without delivering their parked events (they stay on the
    /// parking topic, never on their destinations). Carried out by the leader; audited.
    Drop(ParkedRequestArgs),
}

/// Which parked aggregates a `parked` command names.
#[derive(Args)]
pub(crate) struct AggregateArgs {
    /// Aggregate ids.
    #[arg(required = true)]
    pub(crate) ids: Vec<String>,
    /// Only the aggregate of this type (when an id is parked under several).
    #[arg(long)]
    pub(crate) aggregate_type: Option<String>,
    /// Only the aggregate of this outbox table (`db.table`).
    #[arg(long)]
    pub(crate) table: Option<String>,
}

/// A release's or drop's flags.
#[derive(Args)]
pub(crate) struct ParkedRequestArgs {
    #[command(flatten)]
    pub(crate) which: AggregateArgs,
    /// Why: goes into the audit trail and the parking topic (required).
    #[arg(long)]
    pub(crate) reason: String,
    /// Who asked [default: the OS user].
    #[arg(long)]
    pub(crate) by: Option<String>,
    /// How long to wait for the leader's outcome: a duration (90s, 5m) or seconds; 0
    /// returns once the request is written.
    #[arg(long, default_value = "60s", value_parser = parse_wait)]
    pub(crate) wait: std::time::Duration,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

fn parse_wait(s: &str) -> Result<std::time::Duration, String> {
    match s.trim().parse::<u64>() {
        Ok(secs) => Ok(std::time::Duration::from_secs(secs)),
        Err(_) => crate::units::parse_duration(s),
    }
}

/// `replay`'s flags: the selection (all given conditions hold), pace and audit.
#[derive(Args)]
pub(crate) struct ReplayArgs {
    /// Event ids (repeat, or separate with commas).
    #[arg(long = "event-id", value_delimiter = ',')]
    pub(crate) event_ids: Vec<String>,
    /// Rows of this aggregate id.
    #[arg(long)]
    pub(crate) aggregate_id: Option<String>,
    /// Rows of this event type.
    #[arg(long)]
    pub(crate) event_type: Option<String>,
    /// Event ids from LOW to HIGH, both included (compared as the column's type).
    #[arg(long, value_parser = parse_range, value_name = "LOW..HIGH")]
    pub(crate) id_range: Option<(String, String)>,
    /// Rows written at or after this time (unix seconds, RFC 3339, or a duration ago).
    #[arg(long, value_parser = crate::units::parse_time)]
    pub(crate) since: Option<i64>,
    /// Rows written before this time.
    #[arg(long, value_parser = crate::units::parse_time)]
    pub(crate) until: Option<i64>,
    /// Rows past the handover watermark (source.snapshot.watermark): the back-out to a
    /// polling relay re-publishes what the router published since the cutover.
    #[arg(long)]
    pub(crate) since_watermark: bool,
    /// DATETIME/TIMESTAMP column --since / --until are on
    /// [default: outbox.columns.timestamp, else created_at].
    #[arg(long)]
    pub(crate) timestamp_column: Option<String>,
    /// Records per second at most.
    #[arg(long)]
    pub(crate) rate: Option<f64>,
    /// Why: goes into the audit trail (required).
    #[arg(long)]
    pub(crate) reason: String,
    /// Who asked [default: the OS user].
    #[arg(long)]
    pub(crate) by: Option<String>,
    /// List what would go (event id, topic, key); send nothing, audit nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Print the audit entry as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `reconcile`'s flags.
#[derive(Args)]
pub(crate) struct ReconcileArgs {
    /// Rows written at or after this time (unix seconds, RFC 3339, or a duration ago);
    /// with --id-range, where the topics are read from [default: their beginning].
    #[arg(long, value_parser = crate::units::parse_time, required_unless_present = "id_range")]
    pub(crate) since: Option<i64>,
    /// Rows by event id instead (tables without a timestamp column), LOW..HIGH included.
    #[arg(long, value_parser = parse_range, value_name = "LOW..HIGH")]
    pub(crate) id_range: Option<(String, String)>,
    /// Rows written before this time [default: now].
    #[arg(long, value_parser = crate::units::parse_time)]
    pub(crate) until: Option<i64>,
    /// DATETIME/TIMESTAMP column the window is on
    /// [default: outbox.columns.timestamp, else created_at].
    #[arg(long)]
    pub(crate) timestamp_column: Option<String>,
    /// How long to wait for the router's checkpoint to pass the rows read.
    #[arg(long, value_parser = crate::units::parse_secs_or_duration, default_value = "60s")]
    pub(crate) wait: Duration,
    /// When it does not: rows written this close to the checkpoint's commit time are
    /// in flight, not missing.
    #[arg(long, value_parser = crate::units::parse_secs_or_duration, default_value = "30s")]
    pub(crate) grace: Duration,
    /// Compare both channels of a handover: the live topics (a polling relay's) and the
    /// shadow topics (`run --shadow`'s, with its checkpoint); report what either missed.
    #[arg(long, conflicts_with = "republish_missing")]
    pub(crate) against_shadow: bool,
    /// Send the missing events again with their original ids (throttled, audited).
    #[arg(long, requires = "reason")]
    pub(crate) republish_missing: bool,
    /// Why they are republished: goes into the audit trail.
    #[arg(long)]
    pub(crate) reason: Option<String>,
    /// Who asked [default: the OS user].
    #[arg(long)]
    pub(crate) by: Option<String>,
    /// Records per second at most when republishing.
    #[arg(long)]
    pub(crate) rate: Option<f64>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;

    /// Every command path the binary takes (`checkpoint show`), `help` left out.
    fn commands(cmd: &clap::Command, prefix: &str, out: &mut Vec<String>) {
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            let path = format!("{prefix}{}", sub.get_name());
            if sub.has_subcommands() {
                commands(sub, &format!("{path} "), out);
            } else {
                out.push(path);
            }
        }
    }

    /// docs/operating.md's command list: the command path of each line that starts a
    /// command (`outbox-router [-c FILE] checkpoint show [--json …]`).
    fn documented() -> Vec<String> {
        let text = include_str!("../../docs/operating.md");
        let block = text
            .split("## Commands\n")
            .nth(1)
            .and_then(|rest| rest.split("```\n").nth(1))
            .expect("docs/operating.md has a ## Commands block");
        block
            .lines()
            .filter_map(|line| line.strip_prefix("outbox-router "))
            .map(|line| {
                let line = line.strip_prefix("-c FILE ").unwrap_or(line);
                // What the command does follows in a column after two spaces.
                let usage = line.split("  ").next().unwrap_or(line);
                usage
                    .split_whitespace()
                    .take_while(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
                    .take_while(|w| !w.starts_with('-'))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    }

    /// The command list in docs/operating.md is the CLI's: every command listed, and
    /// nothing listed that the binary does not take.
    #[test]
    fn the_operating_guide_lists_every_command() {
        let mut cli = Vec::new();
        commands(&Cli::command(), "", &mut cli);
        let docs = documented();
        let missing: Vec<_> = cli.iter().filter(|c| !docs.contains(c)).collect();
        let unknown: Vec<_> = docs.iter().filter(|d| !cli.contains(d)).collect();
        assert!(
            missing.is_empty() && unknown.is_empty(),
            "docs/operating.md ## Commands: missing {missing:?}, not commands {unknown:?}"
        );
    }

    /// Every duration flag takes the same forms: seconds, or a duration with units.
    #[test]
    fn one_duration_parser_for_every_flag() {
        let recover = |args: &[&str]| match Cli::try_parse_from(
            [&["outbox-router", "recover"][..], args].concat(),
        )
        .unwrap()
        .command
        {
            Command::Recover(r) => (r.margin, r.longest_transaction),
            _ => unreachable!(),
        };
        let prune = |args: &[&str]| match Cli::try_parse_from(
            [&["outbox-router", "prune", "--older-than", "7d"][..], args].concat(),
        )
        .unwrap()
        .command
        {
            Command::Prune(p) => (p.older_than, p.margin),
            _ => unreachable!(),
        };
        let ten_min = Duration::from_secs(600);
        assert_eq!(recover(&[]), (ten_min, Duration::from_secs(3600)));
        assert_eq!(recover(&["--margin", "600"]).0, ten_min);
        assert_eq!(recover(&["--margin", "10m"]).0, ten_min);
        assert_eq!(
            recover(&["--margin-secs", "600", "--longest-transaction", "2h"]),
            (ten_min, Duration::from_secs(7200))
        );
        assert_eq!(prune(&[]), (Duration::from_secs(7 * 86_400), ten_min));
        assert_eq!(prune(&["--margin", "600"]).1, ten_min);
        assert_eq!(prune(&["--margin", "10m"]).1, ten_min);
        assert!(Cli::try_parse_from(["outbox-router", "recover", "--margin", "soon"]).is_err());
    }
}
