//! Reading Prometheus' text exposition format back: what a scrape of `GET /metrics` says, as
//! samples (name, labels with their values unescaped, value). Comment lines (`# HELP`,
//! `# TYPE`) are skipped. For the tests of this crate and of the daemon, and for tools that
//! check a scrape; it reads what [`crate::render`] writes, not every dialect of the format.

/// One sample line: name, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// Every sample of `text`. Panics on a line that is not a sample (it is for checks).
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("a sample value");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, parse_labels(rest.strip_suffix('}').unwrap())),
                None => (series, Vec::new()),
            };
            Sample {
                name: name.to_string(),
                labels,
                value: value.parse().expect("a number"),
            }
        })
        .collect()
}

/// `key="value",…` with `\\`, `\"` and `\n` unescaped.
fn parse_labels(mut rest: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"").expect("key=\"value\"");
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next().expect("a closing quote") {
                (_, '\\') => match chars.next().expect("an escaped character").1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (i, '"') => break i,
                (_, c) => value.push(c),
            }
        };
        out.push((key.to_string(), value));
        rest = after[end + 1..].trim_start_matches(',');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_read_with_their_labels_unescaped() {
        let text = "# HELP x y\n# TYPE x counter\nx_total{a=\"1\",b=\"q\\\"\\\\\\n\"} 3\ny 0.5\n";
        let got = parse(text);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].name, "x_total");
        assert_eq!(
            got[0].labels,
            [
                ("a".to_string(), "1".to_string()),
                ("b".into(), "q\"\\\n".into())
            ]
        );
        assert_eq!((got[1].name.as_str(), got[1].value), ("y", 0.5));
    }
}
