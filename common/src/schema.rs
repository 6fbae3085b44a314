//! The DynamoDB contracts of lake's two tables: key schemas and authority markers.
//!
//! The operator creates tables and writes markers from these; the runtime checks them at start-up.
//! A marker says which authority a table holds and for which cluster, so that a process pointed at
//! the wrong table (the registry instead of the manifests, or another cluster's) refuses to start.

use serde::Serialize;

/// DynamoDB scalar attribute types used in key schemas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum AttributeType {
    /// String.
    S,
    /// Number.
    N,
}

/// One key attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KeyAttribute {
    pub name: &'static str,
    pub attribute_type: AttributeType,
}

/// A table's primary key: a HASH (partition) attribute and a RANGE (sort) attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KeySchema {
    pub hash: KeyAttribute,
    pub range: KeyAttribute,
}

/// Lance's external-manifest schema, exactly (lance-table `io/commit/dynamodb.rs`): any Lance
/// reader with `s3+ddb://…?ddbTableName=` reads the manifest table.
pub const MANIFEST_KEY_SCHEMA: KeySchema = KeySchema {
    hash: KeyAttribute {
        name: "base_uri",
        attribute_type: AttributeType::S,
    },
    range: KeyAttribute {
        name: "version",
        attribute_type: AttributeType::N,
    },
};

/// The registry's single-table design: `NS#<ns>`/`META`, `NS#<ns>`/`TABLE#<name>`, …
pub const REGISTRY_KEY_SCHEMA: KeySchema = KeySchema {
    hash: KeyAttribute {
        name: "pk",
        attribute_type: AttributeType::S,
    },
    range: KeyAttribute {
        name: "sk",
        attribute_type: AttributeType::S,
    },
};

/// Non-key attributes of a Lance manifest row.
pub const MANIFEST_PATH_ATTR: &str = "path";
pub const MANIFEST_COMMITTER_ATTR: &str = "committer";
pub const MANIFEST_SIZE_ATTR: &str = "size";

/// Attributes of a marker item.
pub const MARKER_FORMAT_ATTR: &str = "format";
pub const MARKER_CLUSTER_ATTR: &str = "cluster";

/// Which authority a table holds, as its marker says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Authority {
    Registry,
    Manifests,
}

impl Authority {
    /// The `format` attribute of this authority's marker.
    pub const fn format(self) -> &'static str {
        match self {
            Authority::Registry => "lake-registry/v1",
            Authority::Manifests => "lake-manifests/v2",
        }
    }

    pub const fn key_schema(self) -> KeySchema {
        match self {
            Authority::Registry => REGISTRY_KEY_SCHEMA,
            Authority::Manifests => MANIFEST_KEY_SCHEMA,
        }
    }

    /// The marker's key in this authority's key schema.
    pub const fn marker_key(self) -> MarkerKey {
        match self {
            // Lance never writes a base_uri starting with "__lake__" (it is a dataset path, and
            // lake's namespaces cannot start with '_'), and never version 0.
            Authority::Manifests => MarkerKey {
                hash: "__lake__/authority",
                range: MarkerRange::Number(0),
            },
            Authority::Registry => MarkerKey {
                hash: "__lake__",
                range: MarkerRange::String("AUTHORITY"),
            },
        }
    }

    /// The authority whose marker has `format`, if any.
    pub fn from_format(format: &str) -> Option<Authority> {
        [Authority::Registry, Authority::Manifests]
            .into_iter()
            .find(|a| a.format() == format)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum MarkerRange {
    Number(u64),
    String(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MarkerKey {
    pub hash: &'static str,
    pub range: MarkerRange,
}

impl std::fmt::Display for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Authority::Registry => "registry",
            Authority::Manifests => "manifests",
        })
    }
}

/// A marker as read from a table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Marker {
    pub format: String,
    pub cluster: String,
}

/// Why a table's marker does not allow a role to use it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MarkerError {
    #[error(
        "table {table:?} has no lake marker; expected a {expected} marker ({format}) written when the table was provisioned. A lake v1 shared table has none either, and is never read: migrate it into a cluster's split tables with spec.migration (docs/guides/migration.md)",
        format = expected.format()
    )]
    Missing { table: String, expected: Authority },
    #[error(
        "table {table:?} holds another authority (marker format {format:?}), not the {expected}; check which table this role was given"
    )]
    WrongAuthority {
        table: String,
        expected: Authority,
        format: String,
    },
    #[error(
        "table {table:?} has an unknown marker format {format:?}; expected {expected_format:?}",
        expected_format = expected.format()
    )]
    UnknownFormat {
        table: String,
        expected: Authority,
        format: String,
    },
    #[error("table {table:?} belongs to cluster {found:?}, not to this cluster {expected:?}")]
    OtherCluster {
        table: String,
        expected: String,
        found: String,
    },
}

impl Marker {
    pub fn new(authority: Authority, cluster: &str) -> Self {
        Self {
            format: authority.format().to_owned(),
            cluster: cluster.to_owned(),
        }
    }

    /// Checks a marker read from `table` (or its absence) against what a role expects.
    pub fn check(
        found: Option<&Marker>,
        table: &str,
        expected: Authority,
        cluster: &str,
    ) -> Result<(), MarkerError> {
        let Some(marker) = found else {
            return Err(MarkerError::Missing {
                table: table.to_owned(),
                expected,
            });
        };
        if marker.format != expected.format() {
            return Err(match Authority::from_format(&marker.format) {
                Some(_) => MarkerError::WrongAuthority {
                    table: table.to_owned(),
                    expected,
                    format: marker.format.clone(),
                },
                None => MarkerError::UnknownFormat {
                    table: table.to_owned(),
                    expected,
                    format: marker.format.clone(),
                },
            });
        }
        if marker.cluster != cluster {
            return Err(MarkerError::OtherCluster {
                table: table.to_owned(),
                expected: cluster.to_owned(),
                found: marker.cluster.clone(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_schema_is_lances() {
        assert_eq!(MANIFEST_KEY_SCHEMA.hash.name, "base_uri");
        assert_eq!(MANIFEST_KEY_SCHEMA.hash.attribute_type, AttributeType::S);
        assert_eq!(MANIFEST_KEY_SCHEMA.range.name, "version");
        assert_eq!(MANIFEST_KEY_SCHEMA.range.attribute_type, AttributeType::N);
        assert_eq!(
            Authority::Manifests.marker_key(),
            MarkerKey {
                hash: "__lake__/authority",
                range: MarkerRange::Number(0)
            }
        );
        assert_eq!(Authority::Manifests.format(), "lake-manifests/v2");
    }

    #[test]
    fn marker_checks_name_table_and_marker() {
        let registry = Marker::new(Authority::Registry, "uid-1");
        let err =
            Marker::check(Some(&registry), "t-reg", Authority::Manifests, "uid-1").unwrap_err();
        assert!(matches!(err, MarkerError::WrongAuthority { .. }));
        let msg = err.to_string();
        assert!(
            msg.contains("t-reg") && msg.contains("lake-registry/v1"),
            "{msg}"
        );

        let other = Marker::new(Authority::Manifests, "uid-2");
        let err = Marker::check(Some(&other), "t-man", Authority::Manifests, "uid-1").unwrap_err();
        assert!(err.to_string().contains("uid-2"), "{err}");

        let old = Marker {
            format: "lake-manifests/v1".into(),
            cluster: "uid-1".into(),
        };
        assert!(matches!(
            Marker::check(Some(&old), "t", Authority::Manifests, "uid-1"),
            Err(MarkerError::UnknownFormat { .. })
        ));
        let missing = Marker::check(None, "t", Authority::Manifests, "uid-1");
        assert!(matches!(missing, Err(MarkerError::Missing { .. })));
        // A v1 table is refused with the way forward, not read.
        assert!(
            missing
                .unwrap_err()
                .to_string()
                .contains("docs/guides/migration.md")
        );
        let ok = Marker::new(Authority::Manifests, "uid-1");
        assert_eq!(
            Marker::check(Some(&ok), "t", Authority::Manifests, "uid-1"),
            Ok(())
        );
    }
}
