//! `validate`: server settings, privileges, outbox columns and Kafka.

use std::process::ExitCode;

use anyhow::Result;

use crate::config::Config;
use crate::ops::validate::Verdict;

/// Prints each check; exit 1 on any problem (a warning is none).
pub(super) async fn run(config: &Config) -> Result<ExitCode> {
    let findings = crate::ops::validate::validate(config).await;
    let (mut failed, mut warned) = (0, 0);
    for f in &findings {
        let label = match f.verdict {
            Verdict::Ok => "ok  ",
            Verdict::Warn => {
                warned += 1;
                "warn"
            }
            Verdict::Fail => {
                failed += 1;
                "FAIL"
            }
        };
        println!("{label}  {}: {}", f.check, f.detail);
        if !f.fix.is_empty() {
            println!("      fix: {}", f.fix);
        }
    }
    if failed == 0 && warned > 0 {
        println!("no problem found; {warned} warning(s) above");
        Ok(ExitCode::SUCCESS)
    } else if failed == 0 {
        println!("all {} checks passed", findings.len());
        Ok(ExitCode::SUCCESS)
    } else {
        println!("{failed} problem(s) found");
        Ok(ExitCode::FAILURE)
    }
}
