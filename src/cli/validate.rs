//! `validate`: server settings, privileges, outbox columns and Kafka.

use std::process::ExitCode;

use anyhow::Result;

use crate::config::Config;
use crate::ops::validate::Verdict;

/// Every source of a pool, each under its name; exit 1 when any has a problem.
pub(super) async fn pool(path: &std::path::Path) -> Result<ExitCode> {
    let pool = crate::pool::Pool::load(path)?;
    let mut failed = Vec::new();
    for source in &pool.sources {
        println!("== source {} ==", source.name);
        if run(&source.config).await? != ExitCode::SUCCESS {
            failed.push(source.name.as_str());
        }
    }
    match failed.is_empty() {
        true => {
            println!("all {} sources passed", pool.sources.len());
            Ok(ExitCode::SUCCESS)
        }
        false => {
            println!("problems in source(s): {}", failed.join(", "));
            Ok(ExitCode::FAILURE)
        }
    }
}

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
