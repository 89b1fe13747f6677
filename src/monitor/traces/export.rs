//! Spans to the collector over OTLP: a bounded queue the streaming path only ever tries
//! to add to (a full queue drops the span and counts it, never waits), and one task
//! that sends batches, one export at a time, each bounded by the export timeout.

use std::collections::HashMap;
use std::time::Duration;

use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use opentelemetry_sdk::Resource;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::config::{Protocol, Resolved};

/// Where a span's fate is counted: its source's `trace_spans_total` series.
#[derive(Clone)]
pub(super) struct Outcomes {
    pub(super) exported: Counter,
    pub(super) dropped: Counter,
}

pub(super) struct Queued {
    pub(super) span: SpanData,
    pub(super) outcomes: Outcomes,
}

/// The process's way to the collector.
pub(super) struct Export {
    pub(super) queue: mpsc::Sender<Queued>,
    task: std::sync::Mutex<Option<JoinHandle<()>>>,
}

/// How long a batch waits for more spans once its first one is there.
const LINGER: Duration = Duration::from_millis(200);

impl Export {
    /// Builds the OTLP exporter for `resolved` and starts sending (on the current Tokio
    /// runtime).
    pub(super) fn start(
        resolved: &Resolved,
        resource: &Resource,
        max_queue: usize,
        max_batch: usize,
        timeout: Duration,
    ) -> Result<Self, String> {
        let mut exporter = match resolved.protocol {
            Protocol::Grpc => {
                let mut metadata = tonic::metadata::MetadataMap::new();
                for (k, v) in &resolved.headers {
                    let key = tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
                        .map_err(|_| format!("monitor.tracing.headers: {k:?} is not a header name"))?;
                    let value = v.expose().parse().map_err(|_| {
                        format!("monitor.tracing.headers.{k}: the value is not a header value (not shown)")
                    })?;
                    metadata.insert(key, value);
                }
                opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_endpoint(resolved.endpoint.clone())
                    .with_timeout(timeout)
                    .with_metadata(metadata)
                    .build()
            }
            Protocol::HttpProtobuf => {
                // reqwest 0.13 here leaves rustls its provider: the process's, ring.
                let _ = rustls::crypto::ring::default_provider().install_default();
                let headers: HashMap<String, String> = resolved
                    .headers
                    .iter()
                    .map(|(k, v)| (k.clone(), v.expose().to_string()))
                    .collect();
                let client = reqwest_s3::Client::builder()
                    .timeout(timeout)
                    .build()
                    .map_err(|e| format!("cannot build the HTTP client for OTLP: {e}"))?;
                opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                    .with_http_client(client)
                    .with_endpoint(resolved.endpoint.clone())
                    .with_timeout(timeout)
                    .with_headers(headers)
                    .build()
            }
        }
        .map_err(|e| {
            resolved.scrub(&format!(
                "cannot build the OTLP exporter for {}: {e}",
                resolved.endpoint
            ))
        })?;
        exporter.set_resource(resource);
        let (queue, spans) = mpsc::channel(max_queue.max(1));
        let task = tokio::spawn(send(
            spans,
            exporter,
            max_batch.max(1),
            timeout,
            resolved.clone(),
        ));
        Ok(Self {
            queue,
            task: std::sync::Mutex::new(Some(task)),
        })
    }

    /// Sends what is queued, waiting at most `within`; what is left is dropped.
    pub(super) async fn flush(&self, within: Duration) {
        let task = self.task.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(task) = task else { return };
        // The queue's senders are the sources' handles, which may outlive this call:
        // it waits for the queue to empty rather than for the task to end.
        if tokio::time::timeout(within, wait_drained(&self.queue))
            .await
            .is_err()
        {
            tracing::warn!("spans still queued for the collector at exit were dropped");
        }
        task.abort();
    }
}

/// Until the queue is empty (the task took everything and sent it).
async fn wait_drained(queue: &mpsc::Sender<Queued>) {
    while queue.capacity() < queue.max_capacity() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The last batch taken may still be on its way.
    tokio::time::sleep(LINGER * 2).await;
}

async fn send(
    mut spans: mpsc::Receiver<Queued>,
    exporter: opentelemetry_otlp::SpanExporter,
    max_batch: usize,
    timeout: Duration,
    resolved: Resolved,
) {
    let endpoint = super::config::shown(&resolved.endpoint);
    let mut batch = Vec::with_capacity(max_batch);
    let mut failing = false;
    loop {
        if spans.recv_many(&mut batch, max_batch).await == 0 {
            return;
        }
        let linger = tokio::time::sleep(LINGER);
        tokio::pin!(linger);
        while batch.len() < max_batch {
            let room = max_batch - batch.len();
            tokio::select! {
                n = spans.recv_many(&mut batch, room) => if n == 0 { break },
                () = &mut linger => break,
            }
        }
        let (data, outcomes): (Vec<SpanData>, Vec<Outcomes>) =
            batch.drain(..).map(|q| (q.span, q.outcomes)).unzip();
        let n = data.len();
        let sent =
            tokio::time::timeout(timeout + Duration::from_secs(1), exporter.export(data)).await;
        match sent {
            Ok(Ok(())) => {
                for o in &outcomes {
                    o.exported.inc();
                }
                if std::mem::take(&mut failing) {
                    tracing::info!(%endpoint, "spans reach the collector again");
                }
            }
            Ok(Err(why)) => {
                for o in &outcomes {
                    o.dropped.inc();
                }
                if !std::mem::replace(&mut failing, true) {
                    let why = resolved.scrub(&why.to_string());
                    tracing::warn!(%endpoint, spans = n, error = %why, "the collector did not take a batch of spans: dropped and counted (outbox_router_trace_spans_total{{outcome=\"dropped\"}}); streaming goes on");
                }
            }
            Err(_) => {
                for o in &outcomes {
                    o.dropped.inc();
                }
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(%endpoint, spans = n, "the collector did not answer in time: spans dropped and counted; streaming goes on");
                }
            }
        }
    }
}
