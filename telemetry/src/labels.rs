//! Label values, bounded: names from the config keep their name, anything else is folded into
//! one value, so no run id, job id, prompt, URL or error text can become a series.

use std::collections::BTreeSet;
use std::sync::RwLock;

/// What a name that is not in the config (a tool the model invented, an agent no longer
/// configured) is counted as.
pub const UNKNOWN: &str = "unknown";

/// The lane every job has unless it asked for another.
pub const DEFAULT_LANE: &str = "default";

/// What a lane that is neither `default` nor reserved in `worker.lanes` is counted as (lanes
/// are free-form names a caller of the API picks).
pub const OTHER_LANE: &str = "other";

static LANES: RwLock<BTreeSet<String>> = RwLock::new(BTreeSet::new());

/// Adds the lanes of `worker.lanes`: from now on they are labelled by name.
pub fn know_lanes<I, S>(lanes: I)
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut known = LANES.write().unwrap_or_else(|p| p.into_inner());
    known.extend(lanes.into_iter().map(Into::into));
}

/// The label of lane `name`: its name when it is `default` or a known lane, else
/// [`OTHER_LANE`].
pub fn lane(name: &str) -> &str {
    let known = LANES.read().unwrap_or_else(|p| p.into_inner());
    if name == DEFAULT_LANE || known.contains(name) {
        name
    } else {
        OTHER_LANE
    }
}

/// `name` when the config has it (`configured`), else [`UNKNOWN`].
pub fn configured(name: &str, configured: bool) -> &str {
    if configured { name } else { UNKNOWN }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_outside_the_config_are_folded_into_other() {
        know_lanes(["interactive"]);
        assert_eq!(lane("default"), "default");
        assert_eq!(lane("interactive"), "interactive");
        assert_eq!(lane("0192f0c4-run-id-looking-lane"), OTHER_LANE);
    }

    #[test]
    fn names_outside_the_config_are_folded_into_unknown() {
        assert_eq!(configured("read_file", true), "read_file");
        assert_eq!(
            configured("rm -rf / # invented by the model", false),
            UNKNOWN
        );
    }
}
