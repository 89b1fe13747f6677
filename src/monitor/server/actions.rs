//! The console's actions, each with an admin credential and a reason, each written to
//! the control topic (the fleet's audit trail of them) before it is answered: a pause,
//! resume or replay reaches whichever instance leads the source — every instance
//! follows the topic — and the answer says when the leader showed it in its report, or
//! what the leader's answer to the replay was.

use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::api::fleet_sources;
use super::app::{Admin, App, ReplayWhich};
use crate::monitor::control::{self, PauseRecord};
use crate::monitor::fleet::SourceState;

/// How long an action waits for the leader's report to show it.
const CONFIRM: Duration = Duration::from_secs(30);

pub fn routes() -> Router<App> {
    Router::new()
        .route("/api/v1/sources/{name}/pause", post(pause))
        .route("/api/v1/sources/{name}/resume", post(resume))
        .route("/api/v1/sources/{name}/replay", post(replay))
}

/// A window replay from the console publishes at most this many rows (more: the CLI,
/// with `--rate`).
const WINDOW_AT_MOST: u64 = 100_000;

/// What a replay is asked with: event ids, or a window.
#[derive(Debug, Deserialize)]
pub struct ReplayAsked {
    #[serde(default)]
    reason: String,
    /// Event ids, separated by commas, spaces or new lines.
    #[serde(default)]
    event_ids: String,
    /// The window's start: unix seconds, RFC 3339 (UTC) or a duration ago (`2h`).
    #[serde(default)]
    since: String,
    /// Its end (default: now), the same forms.
    #[serde(default)]
    until: String,
    #[serde(default)]
    aggregate_id: String,
    #[serde(default)]
    event_type: String,
    /// Count what would be sent and send nothing (`true`, or a checked box's `"on"`).
    #[serde(default)]
    dry_run: Option<serde_json::Value>,
}

impl ReplayAsked {
    /// Which rows, or why the request names none or too many.
    fn which(&self) -> Result<ReplayWhich, String> {
        let text = |s: &str| Some(s.trim().to_string()).filter(|s| !s.is_empty());
        let time = |what: &str, s: &str| {
            text(s)
                .map(|s| crate::units::parse_time(&s).map_err(|e| format!("{what}: {e}")))
                .transpose()
        };
        let ids = split_list(&self.event_ids);
        let which = ReplayWhich {
            since: time("since", &self.since)?,
            until: time("until", &self.until)?,
            aggregate_id: text(&self.aggregate_id),
            event_type: text(&self.event_type),
            dry_run: matches!(&self.dry_run, Some(serde_json::Value::Bool(true)))
                || matches!(&self.dry_run, Some(serde_json::Value::String(s)) if s == "on" || s == "true"),
            event_ids: ids,
        };
        let window = which.since.is_some() || which.until.is_some();
        match (which.event_ids.len(), window) {
            (0, false) => Err("give event ids, or a window (since, and until or now)".into()),
            (n, false) if n > 1000 => Err(
                "give at most 1,000 event ids (more: a window, or `outbox-router replay`)".into(),
            ),
            (0, true) if which.since.is_none() => Err("a window needs its start (since)".into()),
            (0, true) => Ok(which),
            (_, true) => Err("give event ids or a window, not both".into()),
            (_, false) => Ok(which),
        }
    }

    /// The window as the audit view shows it.
    fn window(&self) -> Option<String> {
        let since = self.since.trim();
        (!since.is_empty()).then(|| {
            let mut w = format!("since {since}");
            for (k, v) in [
                ("until", &self.until),
                ("aggregate", &self.aggregate_id),
                ("type", &self.event_type),
            ] {
                if !v.trim().is_empty() {
                    w.push_str(&format!(", {k} {}", v.trim()));
                }
            }
            w
        })
    }
}

/// Publishes the chosen events again with their ids (a replay header names the replay),
/// as `outbox-router replay` would, audited with who and why: asked on the control topic
/// and carried out by the source's leader, whichever instance that is; the answer is
/// awaited. A window is counted here first (the tables are read, nothing sent) and
/// refused when it holds more than the console sends; a dry run only counts.
async fn replay(
    State(app): State<App>,
    Admin(caller): Admin,
    Path(name): Path<String>,
    Json(asked): Json<ReplayAsked>,
) -> Response {
    let reason = asked.reason.trim();
    if reason.is_empty() {
        return refused(
            StatusCode::BAD_REQUEST,
            "say why ({\"reason\": \"…\"}): a replay goes to the audit trail with who and why"
                .into(),
        );
    }
    let which = match asked.which() {
        Ok(which) => which,
        Err(why) => return refused(StatusCode::BAD_REQUEST, why),
    };
    let window = asked.window();
    if which.dry_run || window.is_some() {
        let Some(counter) = &app.desk.replay else {
            return refused(
                StatusCode::NOT_IMPLEMENTED,
                "counting a replay reads the source's tables: not offered by this instance".into(),
            );
        };
        let report = match counter.count(&name, which.clone(), &caller.name).await {
            Ok(report) => report,
            Err(why) => {
                return refused(
                    StatusCode::BAD_GATEWAY,
                    format!("the replay could not be counted: {why}"),
                )
            }
        };
        let n = report["audit"]["count"].as_u64().unwrap_or(0);
        if which.dry_run {
            let said =
                format!("dry run: {n} record(s) would be replayed; nothing sent, nothing audited");
            return Json(json!({ "outcome": said, "count": n, "report": report })).into_response();
        }
        if n > WINDOW_AT_MOST {
            return refused(
                StatusCode::CONFLICT,
                format!("the window holds {n} rows, more than the console replays ({WINDOW_AT_MOST}): narrow it, or run `outbox-router replay --since … --rate …`"),
            );
        }
    }
    let Some((kafka, topic)) = app.control.as_ref().map(|(k, t)| (k, t.as_str())) else {
        return refused(StatusCode::CONFLICT, "cannot replay from the console: a replay is asked of the source's leader on monitor.control_topic, which is off (or this instance has no Kafka); run `outbox-router replay` where the source is configured".into());
    };
    if !fleet_sources(&app).iter().any(|s| s.source == name) {
        return refused(
            StatusCode::NOT_FOUND,
            format!("no source {name:?} reports to this fleet's status topic"),
        );
    }
    let ask = control::ReplayAsk {
        action: "replay asked".into(),
        source: name.clone(),
        by: caller.name.clone(),
        reason: reason.to_string(),
        at: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
        id: format!("ask-{}", uuid::Uuid::new_v4()),
        which,
        window,
    };
    let offset = match control::write(kafka, topic, &ask).await {
        Ok(offset) => offset,
        Err(why) => {
            return refused(
                StatusCode::BAD_GATEWAY,
                format!("the replay was not asked on {topic}: {why}; nothing was sent"),
            )
        }
    };
    tracing::info!(source = %name, by = %caller.name, %reason, ask = %ask.id, %topic, offset, "replay asked of the source's leader");
    let started = Instant::now();
    while started.elapsed() < REPLAY_WAIT {
        let answered = app
            .board
            .actions()
            .into_iter()
            .find(|a| a["action"] == "replay" && a["ask"].as_str() == Some(ask.id.as_str()));
        if let Some(a) = answered {
            return replay_answered(&a, &ask.id);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    (
        StatusCode::ACCEPTED,
        Json(json!({
            "outcome": format!("replay asked (id {}), but no leader of {name} answered within {} s; whichever instance leads it carries it out, and its answer appears in the audit view", ask.id, REPLAY_WAIT.as_secs()),
            "ask": ask.id, "by": caller.name, "offset": offset,
        })),
    )
        .into_response()
}

/// How long a replay from the console waits for the leader's answer.
const REPLAY_WAIT: Duration = Duration::from_secs(60);

/// The leader's answer to a replay ask, as the API gives it.
fn replay_answered(a: &serde_json::Value, ask: &str) -> Response {
    let count = a["count"].as_u64().unwrap_or(0);
    let id = a["id"].as_str().unwrap_or_default();
    let outcome = a["outcome"].as_str().unwrap_or_default();
    let leader = a["leader"].as_str().unwrap_or("?");
    if id.is_empty() {
        return refused(
            StatusCode::BAD_GATEWAY,
            format!("the replay did not run ({leader}): {outcome}"),
        );
    }
    let said = format!("{leader} replayed {count} record(s) ({outcome}; replay id {id})");
    Json(json!({ "outcome": said, "id": id, "count": count, "ask": ask, "leader": leader }))
        .into_response()
}

/// What an action is asked with.
#[derive(Debug, Deserialize)]
pub struct Asked {
    /// Why: required, it goes to the audit trail.
    #[serde(default)]
    reason: String,
}

/// Ids as a form or a script gives them: separated by commas, spaces or new lines.
pub(super) fn split_list(text: &str) -> Vec<String> {
    text.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

pub(super) fn refused(status: StatusCode, why: String) -> Response {
    (status, Json(json!({ "error": why }))).into_response()
}

async fn pause(app: State<App>, admin: Admin, name: Path<String>, asked: Json<Asked>) -> Response {
    set_paused(app, admin, name, asked, true).await
}

async fn resume(app: State<App>, admin: Admin, name: Path<String>, asked: Json<Asked>) -> Response {
    set_paused(app, admin, name, asked, false).await
}

async fn set_paused(
    State(app): State<App>,
    Admin(caller): Admin,
    Path(name): Path<String>,
    Json(asked): Json<Asked>,
    paused: bool,
) -> Response {
    let verb = if paused { "pause" } else { "resume" };
    let Some((kafka, topic)) = app.control.as_ref().map(|(k, t)| (k, t.as_str())) else {
        return refused(StatusCode::CONFLICT, format!("cannot {verb}: monitor.control_topic is off (or this instance has no Kafka), so no instance would hear it"));
    };
    let reason = asked.reason.trim();
    if reason.is_empty() {
        return refused(StatusCode::BAD_REQUEST, format!("say why ({{\"reason\": \"…\"}}): a {verb} goes to the audit trail with who and why"));
    }
    let Some(source) = fleet_sources(&app).into_iter().find(|s| s.source == name) else {
        return refused(
            StatusCode::NOT_FOUND,
            format!("no source {name:?} reports to this fleet's status topic"),
        );
    };
    let is_paused = source.report.state == SourceState::Paused;
    if is_paused == paused {
        let now = if paused {
            "already paused"
        } else {
            "not paused"
        };
        return refused(
            StatusCode::CONFLICT,
            format!(
                "{name} is {now} ({})",
                source
                    .report
                    .cause
                    .as_deref()
                    .unwrap_or("state as its leader reports it")
            ),
        );
    }
    let record = PauseRecord {
        source: name.clone(),
        paused,
        by: caller.name.clone(),
        reason: reason.to_string(),
        at: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
        id: uuid::Uuid::new_v4().to_string(),
    };
    let offset = match control::write(kafka, topic, &record).await {
        Ok(offset) => offset,
        Err(why) => {
            return refused(
                StatusCode::BAD_GATEWAY,
                format!("the {verb} was not recorded on {topic}: {why}; nothing changed"),
            )
        }
    };
    tracing::info!(source = %name, by = %caller.name, %reason, id = %record.id, %topic, offset, "{verb} recorded for the fleet");
    // The leader shows it in its report within a report interval of hearing it.
    let wanted = if paused {
        SourceState::Paused
    } else {
        SourceState::Running
    };
    let started = Instant::now();
    while started.elapsed() < CONFIRM {
        let now = fleet_sources(&app).into_iter().find(|s| s.source == name);
        if let Some(s) = now.filter(|s| s.report.state == wanted && s.leader.is_some()) {
            let outcome = match paused {
                true => format!(
                    "paused: {} stopped streaming at {}",
                    s.leader.as_deref().unwrap_or("?"),
                    s.report.checkpoint.as_deref().unwrap_or("its checkpoint")
                ),
                false => format!(
                    "resumed: {} streams from {}",
                    s.leader.as_deref().unwrap_or("?"),
                    s.report.checkpoint.as_deref().unwrap_or("its checkpoint")
                ),
            };
            return Json(
                json!({ "outcome": outcome, "id": record.id, "by": caller.name, "offset": offset }),
            )
            .into_response();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    (
        StatusCode::ACCEPTED,
        Json(json!({
            "outcome": format!("{verb} recorded (id {}), but no leader of {name} showed it within {} s; whichever instance leads it carries it out", record.id, CONFIRM.as_secs()),
            "id": record.id, "by": caller.name, "offset": offset,
        })),
    )
        .into_response()
}
