//! What a claim-checked record carries instead of its value. The value is the pointer
//! of AWS's payload-offloading libraries (the SQS/SNS extended clients), so their
//! readers parse it as it is:
//! `["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"…","s3Key":"…"}]`;
//! header `claim-check` holds `s3://bucket/key` and `ExtendedPayloadSize` the size of
//! the value in the bucket, for readers that go by headers.

use object_store::path::Path;

use crate::outbox::EventId;

/// Where an event's value goes: `<prefix><topic>/<event id>`, the same for every
/// attempt, so a retry or a re-delivery overwrites the object instead of adding one.
/// Ids that are not plain text (letters, digits, `-_.:`) are written as `0x…` hex.
pub fn object_key(prefix: &str, topic: &str, id: &EventId) -> Path {
    let plain = std::str::from_utf8(&id.0).ok().filter(|s| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c))
            && *s != "."
            && *s != ".."
    });
    let id = match plain {
        Some(text) => text.to_string(),
        None => {
            let hex: String = id.0.iter().map(|b| format!("{b:02x}")).collect();
            format!("0x{hex}")
        }
    };
    Path::from(format!("{prefix}{topic}/{id}"))
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
