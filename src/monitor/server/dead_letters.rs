//! A source's dead letters on the console: newest first, paged, each with the table,
//! binlog position, event id and reason it carries, and a link to the event's lookup
//! (which finds its outbox row and the dead letter's offset).

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use super::actions::refused;
use super::api::Paging;
use super::app::{App, DeskError, Reader};
use super::page::{esc, pager, read_once, url_path, ListQuery};

pub fn routes() -> Router<App> {
    Router::new()
        .route("/api/v1/sources/{name}/dead-letters", get(list))
        .route("/console/sources/{name}/dead-letters", get(page))
}

/// The source's dead letters, newest first. Reading the topic costs something, so a
/// read spends one of the lookups' rate.
async fn recent(
    app: &App,
    source: &str,
) -> Result<(Vec<serde_json::Value>, i64), (StatusCode, String)> {
    let Some(dead_letters) = &app.desk.dead_letters else {
        return Err((
            StatusCode::NOT_IMPLEMENTED,
            "dead letters are not offered by this instance".into(),
        ));
    };
    app.gate.lookup().map_err(|r| (r.status(), r.to_string()))?;
    let read = dead_letters
        .recent(source)
        .await
        .map_err(DeskError::answer)?;
    Ok((
        read.as_array().cloned().unwrap_or_default(),
        dead_letters.window_days(),
    ))
}

async fn list(
    State(app): State<App>,
    Reader(_): Reader,
    Path(name): Path<String>,
    Query(paging): Query<Paging>,
) -> Response {
    match recent(&app, &name).await {
        Ok((all, days)) => {
            let mut body = paging.page(all);
            body["source"] = name.into();
            body["window_days"] = days.into();
            Json(body).into_response()
        }
        Err((code, why)) => refused(code, why),
    }
}

/// Made once (it reads the topic).
async fn page(
    State(app): State<App>,
    Path(name): Path<String>,
    Query(q): Query<ListQuery>,
    request: axum::extract::Request,
) -> Response {
    let title = format!("dead letters · {name}");
    let heading = format!("Dead letters of {name}");
    read_once(
        &app,
        request,
        q.fragment,
        (&title, &heading, "dead-letters-error"),
        || recent(&app, &name),
        |(all, days)| page_main(&name, all, days, q.page),
    )
    .await
}

fn page_main(source: &str, all: Vec<serde_json::Value>, days: i64, page: usize) -> String {
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::Null => "—".to_string(),
        serde_json::Value::String(s) => esc(s),
        other => esc(&other.to_string()),
    };
    let href = esc(&url_path(source));
    let paged = Paging { page, per_page: 50 }.page(all);
    let rows: String = paged["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            let at = d["timestamp_ms"]
                .as_i64()
                .map(|ms| {
                    humantime::format_rfc3339_seconds(
                        std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64),
                    )
                    .to_string()
                })
                .unwrap_or("—".into());
            let id = match d["event_id"].as_str() {
                Some(id) => format!(
                    "<a href=\"/console/sources/{href}/events?id={}\">{}</a>",
                    esc(&url_path(id)),
                    esc(id)
                ),
                None => "—".into(),
            };
            format!(
                "<tr><td>{at}</td><td class=event>{id}</td><td>{}</td><td class=pos>{}</td><td>{}</td><td class=num>{}/{}</td><td>{}</td></tr>",
                text(&d["table"]),
                text(&d["position"]),
                text(&d["reason"]),
                text(&d["partition"]),
                text(&d["offset"]),
                text(&d["claim_check"]),
            )
        })
        .collect();
    format!(
        "<h1>Dead letters of <a href=\"/console/sources/{href}\">{name}</a></h1>\
<p class=note><span id=dead-letters-total>{total}</span> in the last {days} days, newest first; {nav}. \
Fix the row and publish it with <code>outbox-router replay --event-id</code>, or from the event's page.</p>\
<table id=dead-letters><thead><tr><th>at</th><th>event id</th><th>table</th><th>binlog position</th><th>why</th><th>partition/offset</th><th>claim check</th></tr></thead><tbody>{rows}</tbody></table>",
        name = esc(source),
        total = paged["total"].as_u64().unwrap_or(0),
        nav = pager(&format!("/console/sources/{href}/dead-letters"), &paged),
    )
}
