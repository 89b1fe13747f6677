//! The console's pages, rendered here from the same figures the API gives: readable
//! with JavaScript off wherever reading needs no credential (a loopback listener). The
//! script (assets/console.js) refreshes the page's main part every two seconds, sends
//! a credential kept in the tab's session storage as a header, and carries out
//! actions; it is compiled into the binary with the stylesheet.

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;
use serde::Deserialize;

use super::access::Refusal;
use super::api::{fleet_sources, Window};
use super::app::App;
use crate::monitor::fleet::{Columns, FleetSource, SourceReport};

const SCRIPT: &str = include_str!("assets/console.js");
const STYLE: &str = include_str!("assets/console.css");

pub fn routes() -> Router<App> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/console") }))
        .route("/console", get(fleet_page))
        .route("/console/sources/{name}", get(source_page))
        .route("/console/audit", get(audit_page))
        .route("/console/sources/{name}/events", get(event_page))
        .route(
            "/console/assets/console.js",
            get(|| asset(SCRIPT, "text/javascript")),
        )
        .route(
            "/console/assets/console.css",
            get(|| asset(STYLE, "text/css")),
        )
}

async fn asset(body: &'static str, kind: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

/// `?fragment=1`: only the main part (the script's refresh).
#[derive(Debug, Deserialize)]
pub(super) struct View {
    #[serde(default)]
    pub(super) fragment: Option<u8>,
}

/// `?page=N` of a list's page (and `fragment`, as every page).
#[derive(Debug, Deserialize)]
pub(super) struct ListQuery {
    #[serde(default)]
    pub(super) fragment: Option<u8>,
    #[serde(default = "first_page")]
    pub(super) page: usize,
}

fn first_page() -> usize {
    1
}

/// A page made once (not refreshed: it reads Kafka) from what `read` finds, which is
/// read only for a caller who may read: its main part by `main`, or why not, under
/// `heading` in an element `error_id` names.
pub(super) async fn read_once<T, Fut>(
    app: &App,
    request: axum::extract::Request,
    fragment: Option<u8>,
    (title, heading, error_id): (&str, &str, &str),
    read: impl FnOnce() -> Fut,
    main: impl FnOnce(T) -> String,
) -> Response
where
    Fut: std::future::Future<Output = Result<T, (StatusCode, String)>>,
{
    let (parts, _) = request.into_parts();
    let found = match app.gate.reader(&parts) {
        Ok(_) => Some(read().await),
        Err(_) => None,
    };
    answer_as(
        app,
        &parts,
        &View { fragment },
        title,
        false,
        || match found {
            Some(Ok(found)) => main(found),
            Some(Err((_, why))) => format!(
                "<h1>{}</h1><p class=refused id={error_id}>{}</p>",
                esc(heading),
                esc(&why)
            ),
            None => String::new(),
        },
    )
}

/// Text for HTML: every character that could open markup or leave an attribute.
pub(super) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A page, or its main part, or — when this caller may not read — the page without
/// its figures, for the script to fill in with a credential.
fn answer(
    app: &App,
    parts: &axum::http::request::Parts,
    view: &View,
    title: &str,
    main: impl FnOnce() -> String,
) -> Response {
    answer_as(app, parts, view, title, true, main)
}

/// `answer`, for a page the script refreshes (`live`) or one made once.
pub(super) fn answer_as(
    app: &App,
    parts: &axum::http::request::Parts,
    view: &View,
    title: &str,
    live: bool,
    main: impl FnOnce() -> String,
) -> Response {
    let (main, status) = match app.gate.reader(parts) {
        Ok(_) => (main(), StatusCode::OK),
        Err(refusal) if view.fragment.is_some() => return refusal.into_response(),
        Err(Refusal::ReadNeedsCredential) => (
            format!(
                "<p class=refused>{}</p>",
                esc(&Refusal::ReadNeedsCredential.to_string())
            ),
            StatusCode::OK,
        ),
        Err(refusal) => (
            format!("<p class=refused>{}</p>", esc(&refusal.to_string())),
            refusal.status(),
        ),
    };
    if view.fragment.is_some() {
        return Html(main).into_response();
    }
    let served = &app.served;
    let page = format!(
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8><meta name=viewport content=\"width=device-width\">\
<title>{title} · outbox-router</title><link rel=stylesheet href=/console/assets/console.css>\
<script src=/console/assets/console.js defer></script></head><body>\
<header><a class=home href=/console>outbox-router</a><nav><a href=/console>fleet</a> <a href=/console/audit>audit</a></nav><span class=where>instance {instance}{group}</span>\
<form id=signin><label>credential <input id=token type=password autocomplete=off placeholder=\"token\"></label> <button>use</button> <button type=button id=signout>forget</button></form>\
<span id=who></span></header>\n<div id=outcome></div><main id=main{once}>{main}</main></body></html>\n",
        once = if live { "" } else { " data-refresh=off" },
        title = esc(title),
        instance = esc(served.instance()),
        group = served.group().map(|g| format!(" · group {}", esc(g))).unwrap_or_default(),
    );
    (status, Html(page)).into_response()
}

async fn fleet_page(
    State(app): State<App>,
    Query(view): Query<View>,
    request: axum::extract::Request,
) -> Response {
    let (parts, _) = request.into_parts();
    answer(&app, &parts, &view, "fleet", || fleet_main(&app))
}

async fn source_page(
    State(app): State<App>,
    Path(name): Path<String>,
    Query(view): Query<View>,
    request: axum::extract::Request,
) -> Response {
    let (parts, _) = request.into_parts();
    let found = fleet_sources(&app).into_iter().find(|s| s.source == name);
    let title = format!("source {name}");
    match found {
        Some(source) => answer(&app, &parts, &view, &title, || source_main(&app, &source)),
        None => {
            let mut r = answer(&app, &parts, &view, &title, || {
                format!(
                    "<p class=refused>no source {} reports to this fleet's status topic</p>",
                    esc(&name)
                )
            });
            if r.status() == StatusCode::OK {
                *r.status_mut() = StatusCode::NOT_FOUND;
            }
            r
        }
    }
}

fn fleet_main(app: &App) -> String {
    let sources = fleet_sources(app);
    let mut rows = String::new();
    for s in &sources {
        let r = &s.report;
        rows.push_str(&format!(
            "<tr class=\"state-{state}\" data-source=\"{name_attr}\"><td><a href=\"/console/sources/{href}\">{name}</a></td><td class=leader>{leader}</td><td class=state>{state}{cause}</td>\
<td class=num>{lag}</td><td class=num>{behind}</td><td class=num>{runway}</td><td class=num>{eps:.0}</td><td class=num>{in_flight}</td>\
<td class=num>{dead}</td><td class=num>{pa} / {pe}</td><td class=pos>{checkpoint}</td><td class=num>{age}</td></tr>\n",
            state = esc(&s.state),
            name_attr = esc(&s.source),
            href = esc(&url_path(&s.source)),
            name = esc(&s.source),
            leader = esc(s.leader.as_deref().unwrap_or("—")),
            cause = r.cause.as_deref().filter(|_| s.state == "failed").map(|c| format!("<div class=cause>{}</div>", esc(c))).unwrap_or_default(),
            lag = r.lag_ms.map(|ms| duration(ms as f64 / 1000.0)).unwrap_or("—".into()),
            behind = r.bytes_behind.map(|b| bytesize::ByteSize(b).to_string()).unwrap_or("—".into()),
            runway = runway(r),
            eps = r.events_per_sec,
            in_flight = r.in_flight,
            dead = r.dead_letters,
            pa = r.parked_aggregates,
            pe = r.parked_events,
            checkpoint = esc(r.checkpoint.as_deref().unwrap_or("—")),
            age = duration(s.report_age_secs as f64),
        ));
    }
    let note = match (&app.status_topic, app.board.caught_up()) {
        (None, _) => "monitor.status_topic is off: this instance's sources only".to_string(),
        (Some(t), true) => format!("every instance's reports, from {}", esc(t)),
        (Some(t), false) => format!("reading {} (the fleet may not all show yet)", esc(t)),
    };
    format!(
        "<h1>Fleet</h1><p class=note>{count} source(s); {note}</p>\
<table id=fleet><thead><tr><th>source</th><th>leader</th><th>state</th><th>lag</th><th>binlog behind</th><th>runway</th><th>events/s</th><th>in flight</th><th>dead letters</th><th>parked (aggregates / events)</th><th>checkpoint</th><th>report age</th></tr></thead>\n<tbody>{rows}</tbody></table>",
        count = sources.len(),
    )
}

fn source_main(app: &App, s: &FleetSource) -> String {
    let r = &s.report;
    let mut members = String::new();
    for m in &s.members {
        members.push_str(&format!(
            "<tr class=\"{stale}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=num>{}</td></tr>",
            esc(&m.instance),
            esc(&format!("{:?}", m.role).to_lowercase()),
            match m.stale {
                true => "silent (no report for three intervals)".to_string(),
                false => esc(&format!("{:?}", m.state).to_lowercase()),
            },
            esc(m.cause.as_deref().unwrap_or("")),
            duration(m.report_age_secs as f64),
            stale = if m.stale { "stale" } else { "" },
        ));
    }
    let reasons: String = r
        .reasons
        .iter()
        .map(|x| format!("<li>{}</li>", esc(x)))
        .collect();
    let window = Window {
        hours: 24.0,
        points: 300,
    };
    let charts = match app.board.history(&s.source, window.since(), window.points) {
        Some(h) => charts(&h),
        None => "<p class=note>no history yet</p>".into(),
    };
    format!(
        "<h1>Source <span id=source-name>{name}</span></h1>\
<dl class=figures><dt>leader</dt><dd id=leader>{leader}</dd><dt>state</dt><dd id=state>{state}</dd><dt>verdict</dt><dd>{verdict}</dd>\
<dt>lag</dt><dd>{lag}</dd><dt>binlog behind</dt><dd>{behind}</dd><dt>retention runway</dt><dd>{runway}</dd>\
<dt>events/s</dt><dd>{eps:.1}</dd><dt>acknowledgement latency</dt><dd>{ack}</dd><dt>in flight</dt><dd>{in_flight}</dd>\
<dt>checkpoint</dt><dd class=pos>{checkpoint}</dd><dt>reader</dt><dd class=pos>{reader}</dd>\
<dt>dead letters</dt><dd>{dead} · <a id=dead-letters-link href=\"/console/sources/{href}/dead-letters\">list</a></dd><dt>parked</dt><dd>{pa} aggregate(s), {pe} event(s) · <a id=parked-link href=\"/console/sources/{href}/parked\">list and release</a></dd></dl>\
{reasons}{actions}<h2>Last 24 hours</h2><div class=charts>{charts}</div>\
<h2>Instances</h2><table id=members><thead><tr><th>instance</th><th>role</th><th>state</th><th>cause</th><th>report age</th></tr></thead><tbody>{members}</tbody></table>",
        name = esc(&s.source),
        href = esc(&url_path(&s.source)),
        leader = esc(s.leader.as_deref().unwrap_or("none")),
        state = esc(&s.state),
        verdict = r.verdict.map(|v| format!("{v:?}").to_lowercase()).unwrap_or("—".into()),
        lag = r.lag_ms.map(|ms| duration(ms as f64 / 1000.0)).unwrap_or("—".into()),
        behind = r.bytes_behind.map(|b| bytesize::ByteSize(b).to_string()).unwrap_or("—".into()),
        runway = runway(r),
        eps = r.events_per_sec,
        ack = r.ack_latency_ms.map(|ms| format!("{ms:.1} ms")).unwrap_or("—".into()),
        in_flight = r.in_flight,
        checkpoint = esc(r.checkpoint.as_deref().unwrap_or("—")),
        reader = esc(r.reader_position.as_deref().unwrap_or("—")),
        dead = r.dead_letters,
        pa = r.parked_aggregates,
        pe = r.parked_events,
        reasons = if reasons.is_empty() { String::new() } else { format!("<ul class=reasons>{reasons}</ul>") },
        actions = actions(s),
    )
}

/// The source's actions (an admin credential needed; the script sends them).
fn actions(s: &FleetSource) -> String {
    let (verb, what) = match s.report.state {
        crate::monitor::fleet::SourceState::Paused => {
            ("resume", "streams again from the checkpoint")
        }
        _ => (
            "pause",
            "the leader drains and stops; the position stays at the checkpoint",
        ),
    };
    format!(
        "<h2>Find an event</h2><form id=lookup method=get action=\"/console/sources/{href}/events\">\
<input name=id placeholder=\"event id\" required size=40> <button>find</button> \
<span class=note>its outbox row and where its record is in Kafka</span></form>\
<h2>Actions</h2><form class=action id={verb} action=\"/api/v1/sources/{href}/{verb}\" method=post>\
<input name=reason placeholder=\"why (goes to the audit trail)\" required size=40> <button>{verb}</button> \
<span class=note>{what}; needs an admin credential</span></form>\
<h2>Replay a window</h2><form class=action id=replay-window action=\"/api/v1/sources/{href}/replay\" method=post>\
<input name=since placeholder=\"since (2h, or 2026-12-01T10:00:00Z)\" required size=26> <input name=until placeholder=\"until (default now)\" size=20> \
<input name=aggregate_id placeholder=\"aggregate id (any)\" size=16> <input name=event_type placeholder=\"event type (any)\" size=16> \
<label><input type=checkbox name=dry_run checked> dry run</label> \
<input name=reason placeholder=\"why (goes to the audit trail)\" required size=30> <button>replay</button> \
<span class=note>publishes the rows written in the window again, each with its event id and a replay header (on the outbox's timestamp column); a dry run only counts them; at most 100,000 from here</span></form>",
        href = esc(&url_path(&s.source)),
    )
}

async fn audit_page(
    State(app): State<App>,
    Query(view): Query<View>,
    request: axum::extract::Request,
) -> Response {
    let (parts, _) = request.into_parts();
    answer(&app, &parts, &view, "audit", || audit_main(&app))
}

fn audit_main(app: &App) -> String {
    let field =
        |v: &serde_json::Value, k: &str| esc(v.get(k).and_then(|x| x.as_str()).unwrap_or(""));
    let rows: String = app
        .board
        .actions()
        .iter()
        .take(200)
        .map(|a| {
            let action = match (a.get("action").and_then(|x| x.as_str()), a.get("paused").and_then(|p| p.as_bool())) {
                (Some(action), _) => action,
                (None, Some(true)) => "pause",
                (None, Some(false)) => "resume",
                (None, None) => "?",
            };
            format!(
                "<tr><td>{}</td><td>{}</td><td>{action}</td><td>{}</td><td>{}</td><td class=pos>{}</td><td>{}</td></tr>",
                field(a, "at"), field(a, "by"), field(a, "source"), field(a, "reason"), field(a, "id"), esc(&what(a)),
            )
        })
        .collect();
    let from = match &app.control {
        Some((_, topic)) => format!("every instance's actions, from {}", esc(topic)),
        None => "monitor.control_topic is off: no actions".into(),
    };
    format!(
        "<h1>Audit</h1><p class=note>{from}; newest first (the API pages through all: /api/v1/audit)</p>\
<table id=audit><thead><tr><th>at</th><th>by</th><th>action</th><th>source</th><th>why</th><th>id</th><th>what</th></tr></thead><tbody>{rows}</tbody></table>"
    )
}

/// What an action named, in a line: its event ids (the first few), window or
/// aggregates, and its outcome.
fn what(a: &serde_json::Value) -> String {
    let list = |k: &str| -> Option<String> {
        let items: Vec<&str> = a
            .get(k)?
            .as_array()?
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        match items.len() {
            0 => None,
            n if n > 5 => Some(format!("{} … ({n})", items[..5].join(", "))),
            _ => Some(items.join(", ")),
        }
    };
    let named = a
        .get("window")
        .and_then(|w| w.as_str())
        .map(str::to_string)
        .or_else(|| list("event_ids"))
        .or_else(|| list("aggregates"));
    let outcome = a.get("outcome").and_then(|o| o.as_str());
    match (named, outcome) {
        (Some(n), Some(o)) => format!("{n}: {o}"),
        (Some(n), None) => n,
        (None, Some(o)) => o.to_string(),
        (None, None) => String::new(),
    }
}

/// "page N of M" with links to the pages beside it, for a list `Paging::page` made;
/// `base` is the page's path (already escaped).
pub(super) fn pager(base: &str, paged: &serde_json::Value) -> String {
    let page = paged["page"].as_u64().unwrap_or(1);
    let pages = paged["pages"].as_u64().unwrap_or(0);
    let link = |to: u64, label: &str| format!("<a href=\"{base}?page={to}\">{label}</a>");
    let mut nav = format!("page {page} of {}", pages.max(1));
    if page > 1 {
        nav = format!("{} · {nav}", link(page - 1, "newer"));
    }
    if page < pages {
        nav = format!("{nav} · {}", link(page + 1, "older"));
    }
    nav
}

/// A source name as one segment of a path.
pub(super) fn url_path(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

fn runway(r: &SourceReport) -> String {
    match (r.runway_secs, r.retention_secs) {
        (Some(s), _) => duration(s as f64),
        (None, None) => "unbounded".into(),
        (None, Some(_)) => "—".into(),
    }
}

/// Seconds as a person reads them.
pub(super) fn duration(secs: f64) -> String {
    match secs {
        s if s < 10.0 => format!("{s:.1} s"),
        s if s < 120.0 => format!("{s:.0} s"),
        s if s < 7200.0 => format!("{:.0} min", s / 60.0),
        s if s < 172_800.0 => format!("{:.1} h", s / 3600.0),
        s => format!("{:.1} d", s / 86_400.0),
    }
}

fn charts(h: &Columns) -> String {
    [
        ("lag", "s", &h.lag_secs),
        ("retention runway", "s", &h.runway_secs),
        ("events/s", "", &h.events_per_sec),
        ("acknowledgement latency", "ms", &h.ack_latency_ms),
    ]
    .iter()
    .map(|(title, unit, values)| chart(title, unit, &h.at, values))
    .collect()
}

/// A small line chart: the shape over the window, with its last and highest value.
fn chart(title: &str, unit: &str, at: &[u32], values: &[Option<f32>]) -> String {
    const W: f64 = 300.0;
    const H: f64 = 60.0;
    let known: Vec<f32> = values.iter().flatten().copied().collect();
    let (Some(first), Some(last), false) = (at.first(), at.last(), known.is_empty()) else {
        return format!("<figure class=chart data-chart=\"{t}\"><figcaption>{t}: no figure in this window</figcaption></figure>", t = esc(title));
    };
    let max = known
        .iter()
        .copied()
        .fold(0.0f32, f32::max)
        .max(f32::MIN_POSITIVE) as f64;
    let span = f64::from((last - first).max(1));
    let mut lines = Vec::new();
    let mut line = String::new();
    for (t, v) in at.iter().zip(values) {
        match v {
            Some(v) => {
                let x = f64::from(t - first) / span * W;
                let y = H - (f64::from(*v) / max * (H - 4.0)) - 2.0;
                line.push_str(&format!("{x:.1},{y:.1} "));
            }
            None if !line.is_empty() => lines.push(std::mem::take(&mut line)),
            None => {}
        }
    }
    if !line.is_empty() {
        lines.push(line);
    }
    let polylines: String = lines
        .iter()
        .map(|points| format!("<polyline points=\"{}\"/>", points.trim_end()))
        .collect();
    let latest = values
        .iter()
        .rev()
        .flatten()
        .next()
        .map(|v| format!("{v:.1}{unit}"))
        .unwrap_or("—".into());
    format!(
        "<figure class=chart data-chart=\"{t}\"><figcaption>{t}: now {latest}, highest {max:.1}{unit}</figcaption>\
<svg viewBox=\"0 0 {W} {H}\" width={W} height={H} role=img aria-label=\"{t}\">{polylines}</svg></figure>",
        t = esc(title),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_names_is_text() {
        assert_eq!(
            esc("<a href='x'>&\""),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;"
        );
        assert_eq!(url_path("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn a_chart_breaks_where_a_figure_was_unknown() {
        let svg = chart(
            "lag",
            "s",
            &[0, 10, 20, 30],
            &[Some(1.0), None, Some(2.0), Some(4.0)],
        );
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("now 4.0s, highest 4.0s"));
    }
}

/// `?id=EVENT_ID`
#[derive(Debug, Deserialize)]
struct EventQuery {
    #[serde(default)]
    id: String,
    #[serde(default)]
    fragment: Option<u8>,
}

async fn event_page(
    State(app): State<App>,
    Path(name): Path<String>,
    Query(q): Query<EventQuery>,
    request: axum::extract::Request,
) -> Response {
    let (parts, _) = request.into_parts();
    let view = View {
        fragment: q.fragment,
    };
    let title = format!("event {}", q.id);
    // Looked up only for a caller who may read (a lookup reads payloads' places).
    let found = match app.gate.reader(&parts) {
        Ok(_) => Some(super::api::find_event(&app, &name, q.id.trim()).await),
        Err(_) => None,
    };
    answer_as(&app, &parts, &view, &title, false, || match found {
        Some(Ok(rows)) => event_main(&name, &q.id, &rows),
        Some(Err((_, why))) => format!(
            "<h1>Event <span id=event-id>{}</span></h1><p class=refused id=lookup-error>{}</p>",
            esc(&q.id),
            esc(&why)
        ),
        None => String::new(),
    })
}

fn event_main(source: &str, id: &str, rows: &serde_json::Value) -> String {
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::Null => "—".to_string(),
        serde_json::Value::String(s) => esc(s),
        other => esc(&other.to_string()),
    };
    let mut out = format!(
        "<h1>Event <span id=event-id>{}</span></h1><p class=note>source <a href=\"/console/sources/{}\">{}</a></p>",
        esc(id),
        esc(&url_path(source)),
        esc(source)
    );
    for row in rows.as_array().into_iter().flatten() {
        out.push_str(&format!(
            "<h2>Outbox row</h2><dl class=figures><dt>table</dt><dd>{}</dd><dt>aggregate</dt><dd>{} {}</dd><dt>event type</dt><dd>{}</dd><dt>row time</dt><dd>{}</dd><dt>routed to</dt><dd>{}</dd>{}</dl>",
            text(&row["table"]), text(&row["aggregate_type"]), text(&row["aggregate_id"]), text(&row["event_type"]),
            rfc3339(&row["row_time_ms"]),
            text(&row["topic"]),
            row["dead_letter"].as_str().map(|why| format!("<dt>dead-lettered</dt><dd id=dead-lettered>{}</dd>", esc(why))).unwrap_or_default(),
        ));
        let r = &row["record"];
        if r.is_null() {
            out.push_str(&format!(
                "<p class=refused id=not-found>not found in Kafka: {}</p>",
                text(&row["searched"])
            ));
            continue;
        }
        let headers: String = r["headers"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("<tr><td>{}</td><td>{}</td></tr>", esc(k), text(v)))
            .collect();
        out.push_str(&replay_form(source, id));
        out.push_str(&format!(
            "<h2>Record</h2><dl class=figures id=record><dt>topic</dt><dd id=record-topic>{}</dd><dt>partition</dt><dd id=record-partition>{}</dd><dt>offset</dt><dd id=record-offset>{}</dd><dt>timestamp</dt><dd>{}</dd><dt>claim check</dt><dd>{}</dd></dl>\
<table id=headers><thead><tr><th>header</th><th>value</th></tr></thead><tbody>{headers}</tbody></table>",
            text(&r["topic"]), text(&r["partition"]), text(&r["offset"]), rfc3339(&r["timestamp_ms"]), text(&r["claim_check"]),
        ));
    }
    out
}

/// Milliseconds since the epoch as RFC 3339 (UTC), or "—".
fn rfc3339(ms: &serde_json::Value) -> String {
    ms.as_i64()
        .map(|ms| {
            humantime::format_rfc3339_millis(
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64),
            )
            .to_string()
        })
        .unwrap_or("—".into())
}

/// Publishing an event again, with its id (an admin credential; the script sends it).
fn replay_form(source: &str, id: &str) -> String {
    format!(
        "<form class=action id=replay action=\"/api/v1/sources/{}/replay\" method=post>\
<input type=hidden name=event_ids value=\"{}\"><input name=reason placeholder=\"why replay it (goes to the audit trail)\" required size=40> \
<button>replay</button> <span class=note>publishes it again with its event id and a replay header; needs an admin credential</span></form>",
        esc(&url_path(source)),
        esc(id),
    )
}
