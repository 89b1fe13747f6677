//! The console's actions, each with an admin credential and a reason, each written to
//! the control topic (the fleet's audit trail of them) before it is answered: a pause
//! or resume reaches whichever instance leads the source — every instance follows the
//! topic — and the answer says when the leader showed it in its report.

use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::api::fleet_sources;
use super::app::{Admin, App};
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

/// What a replay is asked with.
#[derive(Debug, Deserialize)]
pub struct ReplayAsked {
    #[serde(default)]
    reason: String,
    /// Event ids, separated by commas, spaces or new lines.
    #[serde(default)]
    event_ids: String,
}

/// Publishes the given events again with their ids (a replay header names the replay),
/// as `outbox-router replay --event-id` would, audited with who and why.
async fn replay(
    State(app): State<App>,
    Admin(caller): Admin,
    Path(name): Path<String>,
    Json(asked): Json<ReplayAsked>,
) -> Response {
    let Some(replay) = &app.desk.replay else {
        return refused(
            StatusCode::NOT_IMPLEMENTED,
            "replays are not offered by this instance".into(),
        );
    };
    let reason = asked.reason.trim();
    if reason.is_empty() {
        return refused(
            StatusCode::BAD_REQUEST,
            "say why ({\"reason\": \"…\"}): a replay goes to the audit trail with who and why"
                .into(),
        );
    }
    let ids: Vec<String> = asked
        .event_ids
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if ids.is_empty() || ids.len() > 1000 {
        return refused(
            StatusCode::BAD_REQUEST,
            "give between 1 and 1,000 event ids (a window: `outbox-router replay --since`)".into(),
        );
    }
    let report = match replay
        .replay(&name, ids.clone(), &caller.name, reason)
        .await
    {
        Ok(report) => report,
        Err(why) => {
            return refused(
                StatusCode::BAD_GATEWAY,
                format!("the replay did not run: {why}"),
            )
        }
    };
    let audit = &report["audit"];
    let count = audit["count"].as_u64().unwrap_or(0);
    let id = audit["id"].as_str().unwrap_or_default().to_string();
    let outcome = audit["outcome"].as_str().unwrap_or_default().to_string();
    let parked = report["parked"].as_array().map_or(0, Vec::len);
    if let Some((kafka, topic)) = &app.control {
        let record = control::ReplayRecord {
            action: "replay".into(),
            source: name.clone(),
            by: caller.name.clone(),
            reason: reason.to_string(),
            at: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            id: id.clone(),
            event_ids: ids,
            count,
            outcome: outcome.clone(),
        };
        if let Err(why) = control::write(kafka, topic, &record).await {
            tracing::warn!(%topic, error = %why, replay = %id, "the replay ran but is not on the control topic's audit view (its own audit trail has it)");
        }
    }
    let mut said = format!("replayed {count} record(s) ({outcome}; replay id {id})");
    if parked > 0 {
        said.push_str(&format!("; {parked} left out: their aggregate is parked"));
    }
    Json(json!({ "outcome": said, "id": id, "count": count, "report": report })).into_response()
}

/// What an action is asked with.
#[derive(Debug, Deserialize)]
pub struct Asked {
    /// Why: required, it goes to the audit trail.
    #[serde(default)]
    reason: String,
}

fn refused(status: StatusCode, why: String) -> Response {
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
