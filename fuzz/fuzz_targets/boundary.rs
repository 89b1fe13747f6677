//! Any sequence of boundary events with any bytes (query texts, XA_PREPARE bodies):
//! a step for each, never a panic; a group is never left open after an end step.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outbox_router::source::{classify, statement_tables, Boundaries, BoundaryEvent, Step};

fuzz_target!(|data: &[u8]| {
    let mut boundaries = Boundaries::default();
    // Each chunk: a kind byte, then its bytes up to the next 0xff.
    for chunk in data.split(|b| *b == 0xff) {
        let Some((&kind, body)) = chunk.split_first() else {
            continue;
        };
        let event = match kind % 4 {
            0 if kind & 8 != 0 => BoundaryEvent::MySqlGtid,
            0 => BoundaryEvent::Gtid {
                standalone: kind & 4 != 0,
            },
            1 => BoundaryEvent::Query(body),
            2 => BoundaryEvent::Xid,
            _ => BoundaryEvent::XaPrepare(body),
        };
        let step = boundaries.step(&event);
        let ends = matches!(
            step,
            Step::Commit
                | Step::Rollback
                | Step::XaPrepared(_)
                | Step::XaCommitted(_)
                | Step::XaRolledBack(_)
        );
        assert!(!(ends && boundaries.in_group()), "{step:?} left a group open");
        let _ = classify(body);
        let _ = statement_tables(body, "db");
    }
});
