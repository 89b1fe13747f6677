//! W3C trace context carried by an outbox row, propagated as the record's `traceparent`
//! and `tracestate` headers so consumers join the producer's trace.
//!
//! The column holds either the `traceparent` text itself or, as Debezium's
//! `tracing.span.context.field` does, a Java properties text (`traceparent=…`,
//! `tracestate=…`, as `java.util.Properties.store` writes it). Spans are not created
//! here; only the context travels.

/// Header names of the W3C Trace Context propagation format.
pub const TRACEPARENT: &str = "traceparent";
/// The vendor-specific part of the context.
pub const TRACESTATE: &str = "tracestate";

/// The headers a trace context column's value stands for; an error says why it is not
/// a trace context (the event goes out without them).
pub fn headers(value: &[u8]) -> Result<Vec<(String, Vec<u8>)>, String> {
    let text = std::str::from_utf8(value).map_err(|_| "not UTF-8".to_string())?;
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Ok(Vec::new());
    }
    if is_traceparent(trimmed) {
        return Ok(vec![(TRACEPARENT.into(), trimmed.as_bytes().to_vec())]);
    }
    let props = java_properties::read(text.as_bytes()).map_err(|e| e.to_string())?;
    let Some(parent) = props.get(TRACEPARENT).map(|p| p.trim()) else {
        return Err(format!(
            "neither a traceparent nor properties with a {TRACEPARENT} key"
        ));
    };
    if !is_traceparent(parent) {
        return Err(format!(
            "{TRACEPARENT} {parent:?} is not version-traceid-parentid-flags"
        ));
    }
    let mut out = vec![(TRACEPARENT.into(), parent.as_bytes().to_vec())];
    if let Some(state) = props.get(TRACESTATE).filter(|s| !s.trim().is_empty()) {
        out.push((TRACESTATE.into(), state.trim().as_bytes().to_vec()));
    }
    Ok(out)
}

/// `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>` (any version but `ff`), ids not
/// all zero.
fn is_traceparent(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    let hex = |p: &str, n: usize| {
        p.len() == n
            && p.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let nonzero = |p: &str| p.bytes().any(|b| b != b'0');
    match parts.as_slice() {
        [version, trace, parent, flags, ..] => {
            hex(version, 2)
                && *version != "ff"
                && (*version != "00" || parts.len() == 4)
                && hex(trace, 32)
                && nonzero(trace)
                && hex(parent, 16)
                && nonzero(parent)
                && hex(flags, 2)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    fn names(h: &[(String, Vec<u8>)]) -> Vec<(&str, &str)> {
        h.iter()
            .map(|(k, v)| (k.as_str(), std::str::from_utf8(v).unwrap()))
            .collect()
    }

    #[test]
    fn a_bare_traceparent_is_propagated() {
        assert_eq!(
            names(&headers(PARENT.as_bytes()).unwrap()),
            [("traceparent", PARENT)]
        );
    }

    #[test]
    fn debezium_properties_carry_parent_and_state() {
        // As java.util.Properties.store writes it: a date comment, '=' escaped in values.
        let text = format!(
            "#Tue Dec 01 10:00:00 UTC 2026\ntraceparent={PARENT}\ntracestate=congo\\=t61rcWkgMzE,rojo\\=00f067aa0ba902b7\n"
        );
        assert_eq!(
            names(&headers(text.as_bytes()).unwrap()),
            [
                ("traceparent", PARENT),
                ("tracestate", "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
            ]
        );
    }

    #[test]
    fn what_is_not_a_context_is_refused_and_empty_is_none() {
        assert!(headers(b"").unwrap().is_empty());
        for bad in [
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "tracestate=x",
            "traceparent=hello",
        ] {
            assert!(headers(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
