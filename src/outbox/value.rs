//! Binlog column values as the bytes that go to Kafka.

use mysql_async::binlog::value::BinlogValue;
use mysql_async::Value;

/// The bytes of a value as a client would read it as text; `None` for NULL.
pub fn to_bytes(value: &BinlogValue<'_>) -> Result<Option<Vec<u8>>, String> {
    Ok(Some(match value {
        BinlogValue::Value(Value::NULL) => return Ok(None),
        BinlogValue::Value(Value::Bytes(b)) => b.clone(),
        BinlogValue::Value(Value::Int(i)) => i.to_string().into_bytes(),
        BinlogValue::Value(Value::UInt(u)) => u.to_string().into_bytes(),
        BinlogValue::Value(Value::Float(f)) => f.to_string().into_bytes(),
        BinlogValue::Value(Value::Double(d)) => d.to_string().into_bytes(),
        BinlogValue::Value(Value::Date(y, mo, d, h, mi, s, us)) => {
            let mut t = format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}");
            if *us != 0 {
                t.push_str(&format!(".{us:06}"));
            }
            t.into_bytes()
        }
        BinlogValue::Value(Value::Time(neg, days, h, mi, s, us)) => {
            let hours = u64::from(*days) * 24 + u64::from(*h);
            let sign = if *neg { "-" } else { "" };
            format!("{sign}{hours:02}:{mi:02}:{s:02}.{us:06}").into_bytes()
        }
        BinlogValue::Jsonb(j) => {
            // MySQL's binary JSON; MariaDB stores JSON as text and never gets here.
            let json = serde_json::Value::try_from(j.clone())
                .map_err(|e| format!("JSON column does not decode: {e}"))?;
            json.to_string().into_bytes()
        }
        BinlogValue::JsonDiff(_) => {
            return Err("partial JSON update where a full value was expected".into())
        }
    }))
}

/// Text or binary bytes, which `into_bytes` moves rather than copies.
pub fn is_bytes(value: &BinlogValue<'_>) -> bool {
    matches!(value, BinlogValue::Value(Value::Bytes(_)))
}

/// The bytes of a text or binary value, moved out; `None` for any other value.
pub fn into_bytes(value: BinlogValue<'_>) -> Option<Vec<u8>> {
    match value {
        BinlogValue::Value(Value::Bytes(b)) => Some(b),
        _ => None,
    }
}

/// A value for a JSON envelope: numbers stay numbers, text stays text, JSON stays JSON.
pub fn to_json(value: &BinlogValue<'_>) -> Result<serde_json::Value, String> {
    Ok(match value {
        BinlogValue::Value(Value::Int(i)) => (*i).into(),
        BinlogValue::Value(Value::UInt(u)) => (*u).into(),
        BinlogValue::Value(Value::Float(f)) => serde_json::Value::from(f64::from(*f)),
        BinlogValue::Value(Value::Double(d)) => serde_json::Value::from(*d),
        other => match to_bytes(other)? {
            None => serde_json::Value::Null,
            Some(b) => crate::bytes_json::bytes_json(&b),
        },
    })
}

/// An integer column as a partition number.
pub fn to_partition(value: &BinlogValue<'_>) -> Result<Option<i32>, String> {
    match value {
        BinlogValue::Value(Value::NULL) => Ok(None),
        BinlogValue::Value(Value::Int(i)) => i32::try_from(*i)
            .map(Some)
            .map_err(|_| format!("{i} is out of range")),
        BinlogValue::Value(Value::UInt(u)) => i32::try_from(*u)
            .map(Some)
            .map_err(|_| format!("{u} is out of range")),
        other => Err(format!("holds {other:?}, an integer column is needed")),
    }
}

/// A DATETIME / TIMESTAMP value (taken as UTC) or an integer of epoch milliseconds.
pub fn to_epoch_ms(value: &BinlogValue<'_>) -> Result<Option<i64>, String> {
    match value {
        BinlogValue::Value(Value::NULL) => Ok(None),
        BinlogValue::Value(Value::Int(i)) => Ok(Some(*i)),
        BinlogValue::Value(Value::UInt(u)) => i64::try_from(*u)
            .map(Some)
            .map_err(|_| "timestamp out of range".into()),
        BinlogValue::Value(Value::Date(y, mo, d, h, mi, s, us)) => {
            let days = crate::civil::days_from_civil(i64::from(*y), u32::from(*mo), u32::from(*d));
            let secs = days * 86_400 + i64::from(*h) * 3600 + i64::from(*mi) * 60 + i64::from(*s);
            Ok(Some(secs * 1000 + i64::from(*us) / 1000))
        }
        other => Err(format!(
            "timestamp column holds {other:?}, expected DATETIME, TIMESTAMP or epoch ms"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetime_to_epoch_ms() {
        let v = BinlogValue::Value(Value::Date(2024, 2, 29, 12, 30, 1, 250_000));
        assert_eq!(to_epoch_ms(&v).unwrap(), Some(1_709_209_801_250));
        assert_eq!(
            to_bytes(&v).unwrap().unwrap(),
            b"2024-02-29 12:30:01.250000"
        );
    }

    #[test]
    fn numbers_and_null() {
        assert_eq!(
            to_bytes(&BinlogValue::Value(Value::Int(-5)))
                .unwrap()
                .unwrap(),
            b"-5"
        );
        assert_eq!(to_bytes(&BinlogValue::Value(Value::NULL)).unwrap(), None);
    }
}
