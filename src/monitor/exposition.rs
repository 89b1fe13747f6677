//! Several registries' OpenMetrics text as one exposition: a pool's sources each keep
//! their own registry (every series labelled `source`), and a scrape must see each
//! metric family once — a second `# TYPE` line for a name is a parse error to
//! Prometheus.

/// One family: its `# HELP` / `# TYPE` / `# UNIT` lines, then every registry's samples.
struct Family<'a> {
    name: &'a str,
    header: Vec<&'a str>,
    samples: Vec<&'a str>,
}

/// `texts` (each a whole exposition ending in `# EOF`) merged family by family, in the
/// order families first appear.
pub fn merge<'a>(texts: impl IntoIterator<Item = &'a str>) -> String {
    let mut families: Vec<Family<'a>> = Vec::new();
    for text in texts {
        let mut current: Option<usize> = None;
        for line in text.lines() {
            if line == "# EOF" || line.is_empty() {
                continue;
            }
            if let Some(name) = descriptor_name(line) {
                let index = match families.iter().position(|f| f.name == name) {
                    Some(i) => i,
                    None => {
                        families.push(Family {
                            name,
                            header: Vec::new(),
                            samples: Vec::new(),
                        });
                        families.len() - 1
                    }
                };
                let family = &mut families[index];
                if !family.header.contains(&line) {
                    family.header.push(line);
                }
                current = Some(index);
            } else if let Some(i) = current {
                families[i].samples.push(line);
            }
        }
    }
    let mut out = String::new();
    for family in &families {
        for line in family.header.iter().chain(&family.samples) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push_str("# EOF\n");
    out
}

/// The family a `# HELP`, `# TYPE` or `# UNIT` line describes.
fn descriptor_name(line: &str) -> Option<&str> {
    let rest = line
        .strip_prefix("# HELP ")
        .or_else(|| line.strip_prefix("# TYPE "))
        .or_else(|| line.strip_prefix("# UNIT "))?;
    rest.split(' ').next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor::Metrics;

    #[test]
    fn each_family_appears_once_with_every_sources_series() {
        let (a, b) = (
            Metrics::for_source("orders"),
            Metrics::for_source("billing"),
        );
        a.acked(3);
        b.acked(5);
        let merged = merge([a.encode().as_str(), b.encode().as_str()]);
        let types: Vec<&str> = merged
            .lines()
            .filter(|l| l.starts_with("# TYPE "))
            .collect();
        let mut distinct = types.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(types.len(), distinct.len(), "a family twice:\n{merged}");
        assert!(merged.ends_with("# EOF\n"));
        assert_eq!(merged.matches("# EOF").count(), 1);
        let acked = |source: &str| {
            merged
                .lines()
                .find(|l| {
                    l.starts_with("outbox_router_events_acked_total{")
                        && l.contains(&format!("source=\"{source}\""))
                })
                .unwrap_or_else(|| panic!("no events_acked for {source}:\n{merged}"))
                .rsplit(' ')
                .next()
                .unwrap()
                .to_string()
        };
        assert_eq!(acked("orders"), "3");
        assert_eq!(acked("billing"), "5");
        // Every sample sits under its own family's header: the line before a family's
        // first sample is one of its descriptors or one of its samples.
        let acked_at = merged
            .lines()
            .position(|l| l.starts_with("outbox_router_events_acked_total{"))
            .unwrap();
        let lines: Vec<&str> = merged.lines().collect();
        assert!(
            lines[acked_at - 1].contains("outbox_router_events_acked"),
            "{}",
            lines[acked_at - 1]
        );
    }
}
