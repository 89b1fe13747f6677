//! Any stored bytes: a verified checkpoint or an error, never a panic; valid records
//! round-trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outbox_router::checkpoint::Checkpoint;

fuzz_target!(|data: &[u8]| {
    if let Ok(cp) = Checkpoint::decode(data) {
        assert_eq!(Checkpoint::decode(&cp.encode()).unwrap(), cp);
    }
});
