//! MySQL 8's compressed transaction payloads, checked before their events are trusted.

use mysql_async::binlog::events::TransactionPayloadEvent;

/// Decompresses a MySQL transaction payload as a stream, counting (not keeping) its
/// bytes: an error, or a size other than its header's, means mysql_async produced no
/// events (or not all of them) from it.
pub(in crate::source) fn check(payload: &TransactionPayloadEvent<'_>) -> Result<(), String> {
    let mut reader = payload
        .decompressed()
        .map_err(|e| format!("does not decompress: {e}"))?;
    let size = std::io::copy(&mut reader, &mut std::io::sink())
        .map_err(|e| format!("does not decompress: {e}"))?;
    if size != payload.uncompressed_size() {
        return Err(format!(
            "decompresses to {size} bytes, its header says {}",
            payload.uncompressed_size()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mysql_common::binlog::consts::TransactionPayloadCompressionType as Compression;

    fn payload(compressed: &[u8], stated: u64) -> TransactionPayloadEvent<'static> {
        TransactionPayloadEvent::new(
            compressed.len() as u64,
            Compression::ZSTD,
            stated,
            compressed.to_vec(),
        )
    }

    #[test]
    fn payloads_must_decompress_to_their_stated_size() {
        let events = vec![7u8; 10_000];
        let zstd = zstd::encode_all(&events[..], 3).unwrap();
        assert_eq!(check(&payload(&zstd, 10_000)), Ok(()));
        let short = check(&payload(&zstd, 10_001)).unwrap_err();
        assert!(
            short.contains("10000 bytes, its header says 10001"),
            "{short}"
        );
        let garbage = check(&payload(b"not zstd at all", 100)).unwrap_err();
        assert!(garbage.contains("does not decompress"), "{garbage}");
        let cut = check(&payload(&zstd[..zstd.len() / 2], 10_000));
        assert!(cut.is_err(), "a truncated payload passed");
    }
}
