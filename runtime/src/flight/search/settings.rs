//! The knobs of vector search, as DataFusion configuration: `lake.vector.*`.

use datafusion::common::config::{ConfigExtension, ExtensionOptions};
use datafusion::common::{config_namespace, extensions_options};

config_namespace! {
    /// How `ORDER BY <distance>(col, <vector>) LIMIT k` uses a vector index.
    pub struct VectorSettings {
        /// Answer from a vector index whose metric matches the function; false: the exact
        /// answer (every row's distance, DataFusion's top-k).
        pub use_index: bool, default = true
        /// IVF partitions searched per query (more: better recall, slower).
        pub nprobes: usize, default = 20
        /// Candidates fetched per wanted row and ranked by their exact distance (1: none).
        pub refine_factor: u32, default = 10
        /// HNSW search breadth (0: Lance's default, 1.5 × k).
        pub ef: usize, default = 0
    }
}

extensions_options! {
    /// lake's settings in a statement's DataFusion configuration.
    pub struct LakeSettings {
        pub vector: VectorSettings, default = VectorSettings::default()
    }
}

impl ConfigExtension for LakeSettings {
    const PREFIX: &'static str = "lake";
}

/// The largest value a session may give each numeric setting: a search's work grows with each
/// (partitions probed, candidates ranked, HNSW breadth), and a session is any client's.
/// The same bounds hold for `vector_search`'s options.
pub(super) const MAX_NPROBES: u64 = 1024;
pub(super) const MAX_REFINE_FACTOR: u64 = 100;
pub(super) const MAX_EF: u64 = 10_000;
const BOUNDS: [(&str, u64); 3] = [
    ("lake.vector.nprobes", MAX_NPROBES),
    ("lake.vector.refine_factor", MAX_REFINE_FACTOR),
    ("lake.vector.ef", MAX_EF),
];

/// Why a session may not set `name` to `value`.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::flight) enum SettingError {
    /// No setting has that name.
    Unknown,
    /// Not a value of the setting's type, or outside its bounds.
    Invalid(String),
}

/// `value` for the setting `name` (`lake.vector.nprobes`), in the form DataFusion's
/// configuration takes, if a session may set it.
pub(in crate::flight) fn check(name: &str, value: &str) -> Result<String, SettingError> {
    let mut settings = LakeSettings::default();
    let known = name
        .strip_prefix(LakeSettings::PREFIX)
        .and_then(|rest| rest.strip_prefix('.'))
        .filter(|key| settings.entries().iter().any(|entry| entry.key == *key));
    let Some(key) = known else {
        return Err(SettingError::Unknown);
    };
    // Parsed as configuration parses it, on lake's settings alone (every call's cookies are
    // checked: a whole `ConfigOptions` per check cost more than the rest of the check).
    settings
        .set(key, value)
        .map_err(|e| SettingError::Invalid(e.to_string()))?;
    if let Some((_, most)) = BOUNDS.iter().find(|(n, _)| *n == name) {
        let n: u64 = value
            .trim()
            .parse()
            .map_err(|e| SettingError::Invalid(format!("{e}")))?;
        if n > *most || (name != "lake.vector.ef" && n == 0) {
            return Err(SettingError::Invalid(format!(
                "{name} is {n}; it takes {} to {most}",
                u64::from(name != "lake.vector.ef")
            )));
        }
    }
    Ok(value.trim().to_owned())
}

/// The refine factor a search of `k` rows uses: `refine`, but never more than
/// [`MAX_CANDIDATES`](super::functions::MAX_CANDIDATES) candidates (Lance holds them, vectors
/// included, outside the statement's memory pool), whichever setting or option asked for it.
pub(super) fn capped_refine(refine: u32, k: usize) -> u32 {
    let most = super::functions::MAX_CANDIDATES / k.max(1);
    refine.min(u32::try_from(most).unwrap_or(u32::MAX))
}

/// The vector settings of `options` (the defaults where lake's are not registered).
pub(in crate::flight) fn vector(options: &datafusion::config::ConfigOptions) -> VectorSettings {
    options
        .extensions
        .get::<LakeSettings>()
        .map(|s| s.vector.clone())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use datafusion::config::ConfigOptions;

    use super::*;

    #[test]
    fn settings_are_set_by_their_sql_names() {
        let mut options = ConfigOptions::new();
        options.extensions.insert(LakeSettings::default());
        assert!(vector(&options).use_index);
        options.set("lake.vector.use_index", "false").unwrap();
        options.set("lake.vector.nprobes", "64").unwrap();
        let settings = vector(&options);
        assert!(!settings.use_index);
        assert_eq!(settings.nprobes, 64);
        assert!(options.set("lake.vector.nope", "1").is_err());
    }

    #[test]
    fn candidates_stay_within_the_cap() {
        assert_eq!(capped_refine(100, 10_000), 10);
        assert_eq!(capped_refine(100, 10), 100);
        assert_eq!(capped_refine(7, 0), 7);
    }

    #[test]
    fn a_session_sets_only_known_settings_within_bounds() {
        assert_eq!(check("lake.vector.nprobes", "64"), Ok("64".into()));
        assert_eq!(check("lake.vector.use_index", "false"), Ok("false".into()));
        assert_eq!(check("lake.vector.nope", "1"), Err(SettingError::Unknown));
        assert_eq!(
            check("datafusion.execution.batch_size", "1"),
            Err(SettingError::Unknown)
        );
        for (name, value) in [
            ("lake.vector.nprobes", "1000000"),
            ("lake.vector.nprobes", "0"),
            ("lake.vector.refine_factor", "101"),
            ("lake.vector.ef", "10001"),
            ("lake.vector.nprobes", "-1"),
            ("lake.vector.use_index", "maybe"),
        ] {
            assert!(
                matches!(check(name, value), Err(SettingError::Invalid(_))),
                "{name} = {value}"
            );
        }
    }
}
