//! The knobs of vector search, as DataFusion configuration: `lake.vector.*`.

use datafusion::common::config::ConfigExtension;
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
}
