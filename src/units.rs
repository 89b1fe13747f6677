//! Durations and sizes as people write them: every `_secs`, `_ms`, `_hours` and `_bytes`
//! key of the config (and the command line's durations) takes a number in the key's
//! unit, as before, or text with units (`"10m"`, `"1h 30m"`, `"500ms"`, `"64 MiB"`).

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};

/// A point in time: unix seconds, RFC 3339 (`2026-12-01T10:00:00Z`, `2026-12-01 10:00:00`,
/// UTC), or a duration ago (`2h`, `7d`).
pub fn parse_time(s: &str) -> Result<i64, String> {
    use std::time::{SystemTime, UNIX_EPOCH};
    if let Ok(secs) = s.parse::<i64>() {
        return Ok(secs);
    }
    let at = match humantime::parse_rfc3339_weak(s) {
        Ok(t) => t,
        Err(_) => {
            let ago = parse_duration(s).map_err(|_| {
                format!("{s:?} is not a time: give unix seconds, RFC 3339 (2026-12-01T10:00:00Z) or a duration ago (2h, 7d)")
            })?;
            SystemTime::now() - ago
        }
    };
    Ok(at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64))
}

/// A duration given as text (`"90s"`, `"10m"`, `"2h"`, `"7d"`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("{text:?} is not a duration ({e}): e.g. 500ms, 30s, 10m, 2h, 7d"))
}

/// A number of seconds, or a duration with units (`500ms`, `10m`, `1d 12h`): every
/// duration flag of the command line, as the config file's `_secs` keys take them.
pub fn parse_secs_or_duration(text: &str) -> Result<Duration, String> {
    match text.trim().parse::<u64>() {
        Ok(secs) => Ok(Duration::from_secs(secs)),
        Err(_) => parse_duration(text),
    }
}

/// Bytes from a number of bytes or a size (`"64 MiB"`, `"1GB"`).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    if let Ok(n) = text.trim().parse::<u64>() {
        return Ok(n);
    }
    text.trim()
        .parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|e| format!("{text:?} is not a size ({e}): e.g. 1048576, 64 MiB, 1 GB"))
}

/// The unit a key's plain number is in.
#[derive(Clone, Copy)]
enum Unit {
    Millis,
    Secs,
    Hours,
    Bytes,
}

/// A number in `unit`, or text with units.
struct Amount(Unit);

impl<'de> Visitor<'de> for Amount {
    type Value = f64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Unit::Bytes => f.write_str("a number of bytes or a size such as \"64 MiB\""),
            _ => f.write_str("a number or a duration such as \"500ms\", \"30s\", \"10m\", \"2h\""),
        }
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
        Ok(v as f64)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
        if v < 0 {
            return Err(E::custom(format!("{v} is negative")));
        }
        Ok(v as f64)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
        if v < 0.0 || !v.is_finite() {
            return Err(E::custom(format!("{v} is not a positive number")));
        }
        Ok(v)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<f64, E> {
        match self.0 {
            Unit::Bytes => parse_bytes(v).map(|b| b as f64).map_err(E::custom),
            unit => {
                let d = parse_duration(v).map_err(E::custom)?;
                Ok(match unit {
                    Unit::Millis => d.as_secs_f64() * 1000.0,
                    Unit::Secs => d.as_secs_f64(),
                    _ => d.as_secs_f64() / 3600.0,
                })
            }
        }
    }
}

fn whole<E: de::Error>(v: f64) -> Result<u64, E> {
    if v.fract() != 0.0 {
        return Err(E::custom(format!(
            "{v} is not a whole number in this key's unit"
        )));
    }
    Ok(v as u64)
}

/// `deserialize_with` for a `_ms` key.
pub fn millis<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    d.deserialize_any(Amount(Unit::Millis)).and_then(whole)
}

/// `deserialize_with` for an optional `_ms` key.
pub fn millis_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    millis(d).map(Some)
}

/// `deserialize_with` for a `_secs` key.
pub fn secs<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    d.deserialize_any(Amount(Unit::Secs)).and_then(whole)
}

/// `deserialize_with` for an optional `_hours` key (fractions allowed).
pub fn hours_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    d.deserialize_any(Amount(Unit::Hours)).map(Some)
}

/// `deserialize_with` for a `_bytes` key.
pub fn bytes<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    d.deserialize_any(Amount(Unit::Bytes))
        .and_then(whole)
        .map(|b| b as usize)
}

/// `deserialize_with` for an optional `_bytes` key.
pub fn bytes_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    d.deserialize_any(Amount(Unit::Bytes))
        .and_then(whole)
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Keys {
        #[serde(deserialize_with = "secs")]
        a_secs: u64,
        #[serde(deserialize_with = "millis")]
        b_ms: u64,
        #[serde(default, deserialize_with = "hours_opt")]
        c_hours: Option<f64>,
        #[serde(deserialize_with = "bytes")]
        d_bytes: usize,
    }

    fn parse(text: &str) -> Result<Keys, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn numbers_keep_their_unit_and_text_carries_its_own() {
        let old = parse("a_secs = 600\nb_ms = 500\nc_hours = 36\nd_bytes = 1048576").unwrap();
        assert_eq!(
            (old.a_secs, old.b_ms, old.c_hours, old.d_bytes),
            (600, 500, Some(36.0), 1 << 20)
        );
        let new =
            parse("a_secs = \"10m\"\nb_ms = \"2s\"\nc_hours = \"1d 12h\"\nd_bytes = \"1 MiB\"")
                .unwrap();
        assert_eq!(
            (new.a_secs, new.b_ms, new.c_hours, new.d_bytes),
            (600, 2000, Some(36.0), 1 << 20)
        );
        let e = parse("a_secs = \"1500ms\"\nb_ms = 1\nd_bytes = 1").unwrap_err();
        assert!(e.contains("whole"), "{e}");
        let e = parse("a_secs = \"soon\"\nb_ms = 1\nd_bytes = 1").unwrap_err();
        assert!(e.contains("not a duration") && e.contains("a_secs"), "{e}");
        let e = parse("a_secs = 1\nb_ms = 1\nd_bytes = \"lots\"").unwrap_err();
        assert!(e.contains("not a size"), "{e}");
        assert_eq!(
            parse_secs_or_duration("90").unwrap(),
            Duration::from_secs(90)
        );
        assert_eq!(
            parse_secs_or_duration("1m 30s").unwrap(),
            Duration::from_secs(90)
        );
        assert_eq!(
            parse_secs_or_duration("500ms").unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(parse_bytes("64MiB").unwrap(), 64 << 20);
    }
}
