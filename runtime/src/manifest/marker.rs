//! Authority markers: which authority a table holds and for which cluster.
//!
//! Markers are written only by provisioning code (the operator in the cloud, the metadata side of
//! `lake local` locally); a runtime only loads and checks them, and refuses to start on a mismatch.

use lake_common::schema::{
    Authority, MARKER_CLUSTER_ATTR, MARKER_FORMAT_ATTR, Marker, MarkerError, MarkerRange,
};

use crate::store::{Item, Key, MetaRead, SortKey, StoreError, Value};

/// Why a process may not use a table.
#[derive(Debug, thiserror::Error)]
pub enum AuthorityError {
    #[error(transparent)]
    Marker(#[from] MarkerError),
    #[error(
        "{store} is not a {expected} table: {detail}; its marker says {found}",
        found = found.as_ref().map_or("nothing (no lake marker)".to_owned(), |m| format!("format {:?}, cluster {:?}", m.format, m.cluster))
    )]
    ForeignTable {
        store: String,
        expected: Authority,
        detail: String,
        found: Option<Marker>,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub(crate) fn marker_key(authority: Authority) -> Key {
    let key = authority.marker_key();
    let sort = match key.range {
        MarkerRange::Number(n) => SortKey::N(n),
        MarkerRange::String(s) => SortKey::S(s.to_owned()),
    };
    Key::new(key.hash, sort)
}

/// The marker item of `authority` for `cluster`, for provisioning code to write.
pub fn marker_item(authority: Authority, cluster: &str) -> Item {
    Item::new(marker_key(authority))
        .with(MARKER_FORMAT_ATTR, Value::S(authority.format().to_owned()))
        .with(MARKER_CLUSTER_ATTR, Value::S(cluster.to_owned()))
}

/// Reads the marker a store holds under `authority`'s marker key, if any.
pub async fn load_marker(
    kv: &dyn MetaRead,
    authority: Authority,
) -> Result<Option<Marker>, StoreError> {
    let item = kv.get(&marker_key(authority)).await?;
    Ok(item.map(|item| Marker {
        format: item
            .string(MARKER_FORMAT_ATTR)
            .unwrap_or_default()
            .to_owned(),
        cluster: item
            .string(MARKER_CLUSTER_ATTR)
            .unwrap_or_default()
            .to_owned(),
    }))
}

/// Checks that `kv` holds `expected`'s marker for `cluster`. Read-only.
pub async fn verify_marker(
    kv: &dyn MetaRead,
    expected: Authority,
    cluster: &str,
) -> Result<Marker, AuthorityError> {
    let found = load_marker(kv, expected).await?;
    Marker::check(found.as_ref(), kv.describe(), expected, cluster)?;
    // check() returned Ok, so there is a marker.
    found.ok_or_else(|| {
        AuthorityError::Marker(MarkerError::Missing {
            table: kv.describe().to_owned(),
            expected,
        })
    })
}
