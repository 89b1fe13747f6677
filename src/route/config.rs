//! `[route]`: topic template, event-id header and the shadow prefix.

use serde::Deserialize;

/// How an event becomes a Kafka record.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Topic template; `${routedByValue}` is replaced by the route column's value.
    #[serde(default = "default_topic")]
    pub topic: String,
    /// Header that carries the event id.
    #[serde(default = "default_event_id_header")]
    pub event_id_header: String,
    /// Prefix of every topic under `run --shadow` (dead letters too), so a router can
    /// publish beside a polling relay without touching the live topics.
    #[serde(default = "default_shadow_prefix")]
    pub shadow_prefix: String,
    /// Set by `run --shadow` (and `reconcile --against-shadow`), never in the file.
    #[serde(skip)]
    pub shadow: bool,
}

impl Default for RouteConfig {
    fn default() -> Self {
        Self {
            topic: default_topic(),
            event_id_header: default_event_id_header(),
            shadow_prefix: default_shadow_prefix(),
            shadow: false,
        }
    }
}

fn default_shadow_prefix() -> String {
    "shadow.".into()
}

fn default_topic() -> String {
    "outbox.event.${routedByValue}".into()
}

fn default_event_id_header() -> String {
    "id".into()
}
