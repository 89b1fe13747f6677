//! Any text given as a config file: an error or a config, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = outbox_router::config::Config::parse(text, std::path::Path::new("fuzz.toml"));
        let _ = text.parse::<outbox_router::position::Position>();
    }
});
