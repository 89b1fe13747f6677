//! OpenTelemetry traces, off unless `[monitor.tracing] enabled`: one span per event,
//! continuing the trace the application started (the row's trace context, read through
//! `[outbox] trace_context`), from its binlog commit to Kafka's acknowledgement (in
//! exactly-once, to its Kafka transaction's commit), exported over OTLP. The record's
//! `traceparent` then names the router's span, so a consumer's span hangs below it.
//!
//! Sampling is parent-based: a row whose upstream trace is sampled is traced; one whose
//! upstream is not sampled is not, and its own `traceparent` goes out unchanged; a row
//! without trace context starts a new trace kept at `sample_ratio` (and goes out without
//! a `traceparent` when not kept, as with tracing off).

mod config;
mod event;
mod export;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{
    IdGenerator, RandomIdGenerator, Sampler, SamplingDecision, ShouldSample,
};
use opentelemetry_sdk::Resource;
use prometheus_client::metrics::counter::Counter;

pub use config::{Protocol, TracingConfig};
pub use event::EventTrace;

use event::{at_ms, Ending};
use export::{Export, Outcomes, Queued};

const TRACEPARENT: &str = "traceparent";
const TRACESTATE: &str = "tracestate";

/// The process's tracing: the way to the collector and the sampling rule.
pub struct Tracing {
    export: Export,
    sampler: Sampler,
    ids: RandomIdGenerator,
    scope: InstrumentationScope,
}

impl Tracing {
    /// Starts exporting as `config` (with `OTEL_*` for what it leaves out) says, naming
    /// this process `instance`; `None` when tracing is off. On the current Tokio runtime.
    pub fn start(config: &TracingConfig, instance: &str) -> Result<Option<Arc<Self>>, String> {
        if !config.enabled {
            return Ok(None);
        }
        let resolved = config.resolve(|name| std::env::var(name).ok())?;
        let resource = Resource::builder()
            .with_service_name(resolved.service_name.clone())
            .with_attribute(KeyValue::new("service.instance.id", instance.to_string()))
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let export = Export::start(
            &resolved,
            &resource,
            config.max_queue_spans,
            config.max_batch_spans,
            Duration::from_secs(config.export_timeout_secs.max(1)),
        )?;
        tracing::info!(endpoint = %config::shown(&resolved.endpoint), protocol = ?resolved.protocol, sample_ratio = resolved.sample_ratio, service = %resolved.service_name, "tracing: one span per event, exported over OTLP");
        Ok(Some(Arc::new(Self {
            export,
            sampler: Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                resolved.sample_ratio,
            ))),
            ids: RandomIdGenerator::default(),
            scope: InstrumentationScope::builder("outbox-router")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        })))
    }

    /// A source's traces, tagged with its name and this instance's role in it; its spans
    /// counted as `exported` or `dropped` (its `trace_spans_total` series).
    pub fn for_source(
        self: &Arc<Self>,
        source: &str,
        role: &'static str,
        exported: Counter,
        dropped: Counter,
    ) -> Traces {
        Traces {
            tracing: self.clone(),
            source: source.into(),
            role,
            outcomes: Outcomes { exported, dropped },
        }
    }

    /// Sends what is queued before the process ends, waiting at most `within`.
    pub async fn flush(&self, within: Duration) {
        self.export.flush(within).await;
    }
}

/// What an event's span says about it.
pub struct About<'a> {
    pub event_id: &'a [u8],
    pub table: String,
    pub position: &'a str,
}

/// A source's traces.
#[derive(Clone)]
pub struct Traces {
    tracing: Arc<Tracing>,
    source: Arc<str>,
    role: &'static str,
    outcomes: Outcomes,
}

impl Traces {
    /// Plans the span of an event routed now with `headers` (its row's trace context
    /// among them) and committed at `commit_time_ms`; when it is sampled, the
    /// `traceparent` header becomes the router's span's. `None`: not traced.
    pub fn start(
        &self,
        headers: &mut Vec<(String, Vec<u8>)>,
        commit_time_ms: i64,
        about: About<'_>,
    ) -> Option<Box<EventTrace>> {
        let upstream = headers
            .iter()
            .find(|(k, _)| k == TRACEPARENT)
            .and_then(|(_, v)| parse_traceparent(v, tracestate(headers)));
        let parent = upstream
            .clone()
            .map(|sc| Context::new().with_remote_span_context(sc));
        let t = &self.tracing;
        let trace_id = upstream
            .as_ref()
            .map_or_else(|| t.ids.new_trace_id(), SpanContext::trace_id);
        let decision = t.sampler.should_sample(
            parent.as_ref(),
            trace_id,
            "outbox event",
            &SpanKind::Producer,
            &[],
            &[],
        );
        if decision.decision != SamplingDecision::RecordAndSample {
            return None;
        }
        let span_id = t.ids.new_span_id();
        let state = upstream
            .as_ref()
            .map_or_else(TraceState::default, |sc| sc.trace_state().clone());
        let context = SpanContext::new(trace_id, span_id, TraceFlags::SAMPLED, false, state);
        let ours = format!("00-{trace_id}-{span_id}-01").into_bytes();
        match headers.iter_mut().find(|(k, _)| k == TRACEPARENT) {
            Some((_, v)) => *v = ours,
            None => headers.push((TRACEPARENT.to_string(), ours)),
        }
        let attributes = vec![
            KeyValue::new("messaging.system", "kafka"),
            KeyValue::new("messaging.operation.type", "send"),
            KeyValue::new(
                "messaging.message.id",
                String::from_utf8_lossy(about.event_id).into_owned(),
            ),
            KeyValue::new("outbox.table", about.table),
            KeyValue::new("outbox.binlog_position", about.position.to_string()),
            KeyValue::new("outbox.source", self.source.to_string()),
            KeyValue::new("outbox.role", self.role),
        ];
        Some(Box::new(EventTrace {
            context,
            parent: upstream.map(|sc| sc.span_id()),
            committed: at_ms(commit_time_ms),
            read: SystemTime::now(),
            handed: None,
            topic: None,
            written: None,
            attributes,
        }))
    }

    /// Kafka acknowledged it (at-least-once): its span ends now.
    pub fn acknowledged(&self, trace: EventTrace) {
        self.end(trace, Ending::Acknowledged);
    }

    /// Its Kafka transaction committed (exactly-once).
    pub fn committed(&self, trace: EventTrace) {
        self.end(trace, Ending::Committed);
    }

    /// It was not delivered (`why`): its span ends with an error and claims nothing.
    pub fn failed(&self, trace: EventTrace, why: &str) {
        self.end(trace, Ending::Failed(why.to_string()));
    }

    fn end(&self, trace: EventTrace, ending: Ending) {
        let span = trace.span(ending, &self.tracing.scope);
        let queued = Queued {
            span,
            outcomes: self.outcomes.clone(),
        };
        if self.tracing.export.queue.try_send(queued).is_err() {
            self.outcomes.dropped.inc();
        }
    }
}

/// The `tracestate` header among `headers`, if any.
fn tracestate(headers: &[(String, Vec<u8>)]) -> TraceState {
    headers
        .iter()
        .find(|(k, _)| k == TRACESTATE)
        .and_then(|(_, v)| std::str::from_utf8(v).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or_default()
}

/// A W3C `traceparent` (`00-<trace id>-<span id>-<flags>`) as a remote span context.
fn parse_traceparent(value: &[u8], state: TraceState) -> Option<SpanContext> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let mut parts = text.split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version != "00"
        || parts.next().is_some()
        || trace.len() != 32
        || span.len() != 16
        || flags.len() != 2
    {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let sc = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags) & TraceFlags::SAMPLED,
        true,
        state,
    );
    sc.is_valid().then_some(sc)
}

/// The trace a record's `traceparent` names, for a log line about one event: the
/// router's span when the event was traced, else the application's (the trace id is the
/// same either way). Log lines carry them as the fields `trace_id` and `span_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogIds {
    pub trace_id: TraceId,
    pub span_id: SpanId,
}

impl LogIds {
    /// The ids the `traceparent` among `headers` names, if one is there and well formed.
    pub fn of(headers: &[(String, Vec<u8>)]) -> Option<Self> {
        let (_, value) = headers.iter().find(|(k, _)| k == TRACEPARENT)?;
        Self::parse(value)
    }

    /// The ids a `traceparent` value names.
    pub fn parse(traceparent: &[u8]) -> Option<Self> {
        parse_traceparent(traceparent, TraceState::default()).map(|sc| Self {
            trace_id: sc.trace_id(),
            span_id: sc.span_id(),
        })
    }
}

/// `ids`' trace id as a log field's value (the field is left out when `None`).
pub fn trace_id_field(ids: Option<LogIds>) -> Option<tracing::field::DisplayValue<TraceId>> {
    ids.map(|i| tracing::field::display(i.trace_id))
}

/// `ids`' span id as a log field's value (the field is left out when `None`).
pub fn span_id_field(ids: Option<LogIds>) -> Option<tracing::field::DisplayValue<SpanId>> {
    ids.map(|i| tracing::field::display(i.span_id))
}

/// The span id a record's headers name as its parent (the router's, when traced).
pub fn span_of(headers: &rdkafka::message::BorrowedHeaders) -> Option<SpanId> {
    use rdkafka::message::Headers;
    let value = headers
        .iter()
        .find(|h| h.key == TRACEPARENT)
        .and_then(|h| h.value)?;
    parse_traceparent(value, TraceState::default()).map(|sc| sc.span_id())
}

#[cfg(test)]
mod tests {
    use super::*;

    const APP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_is_read_and_anything_else_is_not() {
        let sc = parse_traceparent(APP.as_bytes(), TraceState::default()).unwrap();
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_sampled() && sc.is_remote());
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert!(
                parse_traceparent(bad.as_bytes(), TraceState::default()).is_none(),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_span_ends_as_the_journey_did_and_claims_no_delivery_it_did_not_see() {
        let scope = InstrumentationScope::builder("t").build();
        let app = parse_traceparent(APP.as_bytes(), TraceState::default()).unwrap();
        let plan = || EventTrace {
            context: SpanContext::new(
                app.trace_id(),
                SpanId::from(7),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent: Some(app.span_id()),
            committed: at_ms(1_000_000),
            read: at_ms(1_000_400),
            handed: None,
            topic: None,
            written: None,
            attributes: Vec::new(),
        };
        let mut acked = plan();
        acked.handed();
        acked.answered_for("orders");
        acked.written(3, 42, false);
        let span = acked.span(Ending::Acknowledged, &scope);
        assert_eq!(span.parent_span_id, app.span_id());
        assert_eq!(span.start_time, at_ms(1_000_000));
        let names: Vec<&str> = span.events.iter().map(|e| e.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "binlog commit",
                "read by the router",
                "handed to Kafka",
                "acknowledged by Kafka"
            ]
        );
        assert!(span
            .attributes
            .iter()
            .any(|kv| kv.key.as_str() == "messaging.kafka.offset" && kv.value == 42i64.into()));
        assert!(span.attributes.iter().any(
            |kv| kv.key.as_str() == "messaging.destination.name" && kv.value == "orders".into()
        ));
        // Written into a transaction that aborted: the write is an event, no claim.
        let mut aborted = plan();
        aborted.written(3, 43, true);
        let aborted = aborted.span(Ending::Failed("transaction aborted".into()), &scope);
        let names: Vec<&str> = aborted.events.iter().map(|e| e.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "binlog commit",
                "read by the router",
                "written to Kafka",
                "not delivered"
            ]
        );
        assert!(aborted
            .attributes
            .iter()
            .all(|kv| kv.key.as_str() != "messaging.kafka.offset"));
        let failed = plan().span(Ending::Failed("transaction aborted".into()), &scope);
        assert!(matches!(
            failed.status,
            opentelemetry::trace::Status::Error { .. }
        ));
        assert!(failed
            .events
            .iter()
            .all(|e| !e.name.contains("acknowledged") && !e.name.contains("committed")));
        // A server clock ahead of the router's: the span starts at the read.
        let mut ahead = plan();
        ahead.committed = at_ms(1_002_000);
        assert_eq!(
            ahead.span(Ending::Acknowledged, &scope).start_time,
            at_ms(1_000_400)
        );
    }
}
