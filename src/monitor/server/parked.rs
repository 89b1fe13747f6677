//! Ordered parking on the console: a source's parked aggregates (paged, from the
//! parking topic) and their release — a request on the parking topic that the source's
//! leader carries out between two binlog transactions, whichever instance the page is
//! on; audited with who and why, and listed on the audit view through the control topic.
//! Dropping parked events (never delivering them) stays a command (`parked drop`): the
//! console offers nothing that loses events.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::actions::{refused, split_list};
use super::api::Paging;
use super::app::{Admin, App, DeskError, ParkedWhich, Reader};
use super::page::{duration, esc, pager, read_once, url_path, ListQuery};
use crate::monitor::control::{self, ParkedRecord};

/// At most this many aggregates in one release (more: `outbox-router parked release`).
const RELEASE_AT_MOST: usize = 1000;

pub fn routes() -> Router<App> {
    Router::new()
        .route("/api/v1/sources/{name}/parked", get(list))
        .route("/api/v1/sources/{name}/parked/release", post(release))
        .route("/console/sources/{name}/parked", get(page))
}

/// The source's parked aggregates, oldest first. Reading the parking topic whole costs
/// something, so a read spends one of the lookups' rate.
async fn parked(app: &App, source: &str) -> Result<Vec<serde_json::Value>, (StatusCode, String)> {
    let Some(parking) = &app.desk.parking else {
        return Err((
            StatusCode::NOT_IMPLEMENTED,
            "parked aggregates are not offered by this instance".into(),
        ));
    };
    app.gate.lookup().map_err(|r| (r.status(), r.to_string()))?;
    let listed = parking.list(source).await.map_err(DeskError::answer)?;
    Ok(listed.as_array().cloned().unwrap_or_default())
}

async fn list(
    State(app): State<App>,
    Reader(_): Reader,
    Path(name): Path<String>,
    Query(paging): Query<Paging>,
) -> Response {
    match parked(&app, &name).await {
        Ok(all) => {
            let mut body = paging.page(all);
            body["source"] = name.into();
            Json(body).into_response()
        }
        Err((code, why)) => refused(code, why),
    }
}

/// What a release is asked with.
#[derive(Debug, Deserialize)]
pub struct ReleaseAsked {
    #[serde(default)]
    reason: String,
    /// Aggregate ids, separated by commas, spaces or new lines.
    #[serde(default)]
    aggregate_ids: String,
    /// Narrows ids parked under more than one type or table.
    #[serde(default)]
    aggregate_type: Option<String>,
    #[serde(default)]
    table: Option<String>,
}

/// Releases the named aggregates: their parked events are published in order, then
/// their later events flow straight (`outbox-router parked release`).
async fn release(
    State(app): State<App>,
    Admin(caller): Admin,
    Path(name): Path<String>,
    Json(asked): Json<ReleaseAsked>,
) -> Response {
    let Some(parking) = &app.desk.parking else {
        return refused(
            StatusCode::NOT_IMPLEMENTED,
            "releases are not offered by this instance".into(),
        );
    };
    let reason = asked.reason.trim();
    if reason.is_empty() {
        return refused(
            StatusCode::BAD_REQUEST,
            "say why ({\"reason\": \"…\"}): a release goes to the audit trail with who and why"
                .into(),
        );
    }
    let ids = split_list(&asked.aggregate_ids);
    if ids.is_empty() || ids.len() > RELEASE_AT_MOST {
        return refused(
            StatusCode::BAD_REQUEST,
            format!("give between 1 and {RELEASE_AT_MOST} parked aggregate ids (more: `outbox-router parked release`)"),
        );
    }
    let blank = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
    let which = ParkedWhich {
        ids: ids.clone(),
        aggregate_type: blank(asked.aggregate_type),
        table: blank(asked.table),
    };
    let answered = match parking.release(&name, which, &caller.name, reason).await {
        Ok(answered) => answered,
        Err(e) => {
            let (code, why) = e.answer();
            return refused(code, format!("nothing was released: {why}"));
        }
    };
    let outcomes = answered["outcomes"].as_array().cloned().unwrap_or_default();
    let released = outcomes
        .iter()
        .filter(|o| o["outcome"] == "released")
        .count();
    let waiting = answered["waiting"].as_array().map_or(0, Vec::len);
    let request = answered["request"].as_str().unwrap_or_default().to_string();
    let mut said = format!("released {released} of {} aggregate(s)", ids.len());
    let others: Vec<String> = outcomes
        .iter()
        .filter(|o| o["outcome"] != "released")
        .map(|o| {
            format!(
                "{} {}: {}",
                o["id"].as_str().unwrap_or("?"),
                o["outcome"].as_str().unwrap_or("?"),
                o["reason"].as_str().unwrap_or("")
            )
        })
        .collect();
    if !others.is_empty() {
        said.push_str(&format!("; {}", others.join("; ")));
    }
    if waiting > 0 {
        said.push_str(&format!(
            "; {waiting} not answered yet by the leader (it carries them out when it can)"
        ));
    }
    said.push_str(&format!(" (request {request})"));
    if let Some((kafka, topic)) = &app.control {
        let record = ParkedRecord {
            action: "parked release".into(),
            source: name.clone(),
            by: caller.name.clone(),
            reason: reason.to_string(),
            at: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            id: request.clone(),
            aggregates: ids,
            outcome: said.clone(),
        };
        if let Err(why) = control::write(kafka, topic, &record).await {
            tracing::warn!(%topic, error = %why, %request, "the release ran but is not on the control topic's audit view (its own audit trail has it)");
        }
    }
    tracing::info!(source = %name, by = %caller.name, %reason, %request, "{said}");
    let status = match waiting {
        0 => StatusCode::OK,
        _ => StatusCode::ACCEPTED,
    };
    (
        status,
        Json(json!({ "outcome": said, "request": request, "answered": answered })),
    )
        .into_response()
}

/// The parked page: made once (it reads the parking topic), and again after a release.
async fn page(
    State(app): State<App>,
    Path(name): Path<String>,
    Query(q): Query<ListQuery>,
    request: axum::extract::Request,
) -> Response {
    let title = format!("parked · {name}");
    let heading = format!("Parked aggregates of {name}");
    read_once(
        &app,
        request,
        q.fragment,
        (&title, &heading, "parked-error"),
        || parked(&app, &name),
        |all| page_main(&name, all, q.page),
    )
    .await
}

const PER_PAGE: usize = 50;

fn page_main(source: &str, all: Vec<serde_json::Value>, page: usize) -> String {
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::Null => "NULL".to_string(),
        serde_json::Value::String(s) => esc(s),
        other => esc(&other.to_string()),
    };
    let href = esc(&url_path(source));
    let paged = Paging {
        page,
        per_page: PER_PAGE,
    }
    .page(all);
    let rows: String = paged["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            format!(
                "<tr><td>{}</td><td>{}</td><td class=aggregate>{}</td><td class=num>{}</td><td class=num>{}</td>\
<td><a href=\"/console/sources/{href}/events?id={}\">{}</a></td><td>{}</td></tr>",
                text(&a["table"]),
                text(&a["aggregate_type"]),
                text(&a["id"]),
                text(&a["events"]),
                duration(a["oldest_age_secs"].as_f64().unwrap_or(0.0)),
                esc(&url_path(a["first_event"].as_str().unwrap_or_default())),
                text(&a["first_event"]),
                text(&a["reason"]),
            )
        })
        .collect();
    let total = paged["total"].as_u64().unwrap_or(0);
    let nav = pager(&format!("/console/sources/{href}/parked"), &paged);
    format!(
        "<h1>Parked aggregates of <a href=\"/console/sources/{href}\">{name}</a></h1>\
<p class=note><span id=parked-total>{total}</span> aggregate(s) held back, oldest first, as the parking topic holds them; {nav}</p>\
<table id=parked><thead><tr><th>table</th><th>aggregate type</th><th>aggregate id</th><th>events</th><th>parked for</th><th>first event</th><th>why</th></tr></thead><tbody>{rows}</tbody></table>\
<h2>Release</h2><form class=action id=release data-reload action=\"/api/v1/sources/{href}/parked/release\" method=post>\
<input name=aggregate_ids placeholder=\"aggregate ids (spaces or commas)\" required size=40> \
<input name=reason placeholder=\"why (goes to the audit trail)\" required size=30> <button>release</button> \
<span class=note>fix the rows first: the leader publishes each aggregate's parked events in order, as the table holds them now, then its later events flow straight; one it still cannot publish stays parked. Needs an admin credential.</span></form>",
        name = esc(source),
    )
}
