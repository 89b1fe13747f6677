//! Which values the claim check takes: `[claim_check]`'s threshold and aggregate types,
//! asked by the route stage where an event's aggregate type is still known.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::config::ClaimCheckConfig;
use crate::route::Offload;

/// Values over the threshold, and every value of the listed aggregate types.
#[derive(Debug)]
struct Policy {
    threshold_bytes: usize,
    aggregate_types: BTreeSet<String>,
}

impl Offload for Policy {
    fn takes(&self, aggregate_type: Option<&str>, len: usize) -> bool {
        len > self.threshold_bytes
            || aggregate_type.is_some_and(|t| self.aggregate_types.contains(t))
    }
}

/// The values `cfg` sends to the bucket, for `route::Router::with_offload`.
pub fn offload(cfg: &ClaimCheckConfig) -> Arc<dyn Offload> {
    Arc::new(Policy {
        threshold_bytes: cfg.threshold_bytes,
        aggregate_types: cfg.aggregate_types.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over the threshold always; a listed aggregate type at any size; a dead letter
    /// (no aggregate type) by its size alone.
    #[test]
    fn takes_large_values_and_the_listed_aggregate_types() {
        let cfg: ClaimCheckConfig = toml::from_str(
            "bucket = \"b\"\nthreshold_bytes = 100\naggregate_types = [\"Invoice\"]",
        )
        .unwrap();
        let offload = offload(&cfg);
        assert!(!offload.takes(Some("Order"), 100));
        assert!(offload.takes(Some("Order"), 101));
        assert!(offload.takes(Some("Invoice"), 1));
        assert!(!offload.takes(None, 100));
        assert!(offload.takes(None, 101));
    }
}
