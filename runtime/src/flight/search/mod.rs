//! Search through plain SQL (docs/guides/search.md): `ORDER BY <distance>(col, <vector>) LIMIT
//! k` answered by a table's vector index. The rule ([`rule`]) only swaps the table's scan for a
//! nearest-neighbour scan ([`nearest`]); the statement's own sort and distance expression stay
//! above it, so the values and the order users get are the SQL function's, evaluated exactly on
//! the candidates the index chose.

mod functions;
mod nearest;
mod rule;
mod scored;
mod sealed;
mod settings;
mod tokens;

pub(in crate::flight) use functions::register as register_table_functions;
#[cfg(test)]
pub(in crate::flight) use nearest::parameter_vectors;
pub(in crate::flight) use nearest::{bind_searches, lake_table, reads_only_indexed_searches};
pub(in crate::flight) use rule::NearestNeighbours;
pub(in crate::flight) use sealed::Unseal;
pub(in crate::flight) use settings::{LakeSettings, SettingError, check as check_setting};
pub(in crate::flight) use tokens::contains_tokens;
