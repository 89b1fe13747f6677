//! What a claim-checked record carries instead of its value. The value is the pointer
//! of AWS's payload-offloading libraries (the SQS/SNS extended clients), so their
//! readers parse it as it is:
//! `["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"…","s3Key":"…"}]`;
//! header `claim-check` holds `s3://bucket/key` and `ExtendedPayloadSize` the size of
//! the value in the bucket, for readers that go by headers.

use object_store::path::Path;

use crate::outbox::EventId;

/// Where a value goes: `<prefix><topic>/<event id>/<sha-256 of the value, hex>`. The
/// key belongs to these bytes and nothing else: a retry writes the same bytes under the
/// same key, a replay whose bytes differ (a CloudEvent's `time`) gets a key of its own,
/// and records without a usable event id (NULL, empty) never share an object unless
/// they carry the same bytes. No write ever changes the bytes an earlier record names.
/// Ids that are not plain text (letters, digits, `-_.:`) are written as `0x…` hex.
pub fn object_key(prefix: &str, topic: &str, id: &EventId, value: &[u8]) -> Path {
    use sha2::{Digest, Sha256};
    let plain = std::str::from_utf8(&id.0).ok().filter(|s| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c))
            && *s != "."
            && *s != ".."
    });
    let id = match plain {
        Some(text) => text.to_string(),
        None => format!("0x{}", hex(&id.0)),
    };
    let digest = hex(&Sha256::digest(value));
    Path::from(format!("{prefix}{topic}/{id}/{digest}"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The header with the object's `s3://bucket/key`.
pub const HEADER: &str = "claim-check";
/// The header with the object's size in bytes (the extended clients' attribute name).
pub const SIZE_HEADER: &str = "ExtendedPayloadSize";
/// The pointer's class name in the extended clients' format.
const POINTER_CLASS: &str = "software.amazon.payloadoffloading.PayloadS3Pointer";

/// Where a record's value is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub bucket: String,
    pub key: String,
    /// The value's size in bytes.
    pub size: usize,
}

impl Reference {
    /// The record value that stands for the object.
    pub fn value(&self) -> Vec<u8> {
        serde_json::json!([POINTER_CLASS, { "s3BucketName": self.bucket, "s3Key": self.key }])
            .to_string()
            .into_bytes()
    }

    /// `s3://bucket/key`.
    pub fn location(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.key)
    }

    /// The headers a claim-checked record gains.
    pub fn headers(&self) -> [(String, Vec<u8>); 2] {
        [
            (HEADER.to_string(), self.location().into_bytes()),
            (SIZE_HEADER.to_string(), self.size.to_string().into_bytes()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_belongs_to_its_bytes() {
        let none = EventId(Vec::new());
        let key = |id: &EventId, v: &[u8]| object_key("p/", "t", id, v).to_string();
        assert_ne!(key(&none, b"row one"), key(&none, b"row two"));
        assert_eq!(key(&none, b"row one"), key(&none, b"row one"));
        let e1 = EventId(b"e-1".to_vec());
        assert_eq!(
            key(&e1, b"abc"),
            "p/t/e-1/ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(key(&EventId(b"a/b".to_vec()), b"x").starts_with("p/t/0x612f62/"));
    }

    #[test]
    fn the_value_is_the_extended_clients_pointer_and_headers_read_back() {
        let r = Reference {
            bucket: "events".into(),
            key: "outbox/orders/e-1".into(),
            size: 52_428_800,
        };
        assert_eq!(
            String::from_utf8(r.value()).unwrap(),
            r#"["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"events","s3Key":"outbox/orders/e-1"}]"#
        );
        let headers = r.headers();
        assert_eq!(headers[0].1, b"s3://events/outbox/orders/e-1");
        assert_eq!(headers[1].1, b"52428800");
    }
}
