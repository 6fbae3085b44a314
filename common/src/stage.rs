//! The managed FILE stage: the descriptor the query endpoint hands to SDKs, and stage paths.
//!
//! The descriptor says *where* the stage is (a local directory, or an S3 bucket and prefix) and
//! nothing else. It has no field that could carry a credential: SDKs authenticate to object
//! storage with their own identity (the AWS default credential chain), so a descriptor is safe to
//! log, cache or show. Decoding is strict: an unknown protocol version or an unknown field is a
//! typed error, never a guess.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::plan::AwsTarget;

/// The only descriptor protocol this build speaks.
pub const STAGE_PROTOCOL_VERSION: u32 = 1;

/// The custom Flight action that returns the descriptor (one result, JSON).
pub const DESCRIBE_STAGE_ACTION: &str = "lake.stage.describe";

/// The custom Flight action that returns the metadata endpoint query sends writes to (one
/// result, UTF-8; empty when none is configured).
pub const METADATA_ENDPOINT_ACTION: &str = "lake.metadata.endpoint";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageDescriptor {
    pub protocol_version: u32,
    pub backend: StageBackend,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum StageBackend {
    /// A directory on the machine that runs the servers (and the SDK: local lakes only).
    Local { root: String },
    /// An S3 (or S3-compatible) prefix; `prefix` has no leading or trailing `/`.
    S3 {
        bucket: String,
        prefix: String,
        region: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        endpoint: Option<String>,
    },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StageDescriptorError {
    #[error("the stage descriptor is not valid JSON: {0}")]
    Json(String),
    #[error("the stage descriptor has no protocol_version")]
    MissingVersion,
    #[error(
        "the stage descriptor speaks protocol version {found}; this client supports only \
         version {STAGE_PROTOCOL_VERSION} (upgrade the client)"
    )]
    UnsupportedVersion { found: u64 },
    #[error("the stage descriptor is malformed: {0}")]
    Malformed(String),
    #[error("the stage {stage:?} is an s3:// URL without a bucket")]
    NoBucket { stage: String },
    #[error("the stage {stage:?} is on S3 but the plan has no AWS region")]
    NoRegion { stage: String },
}

impl StageDescriptor {
    /// The descriptor of a configured stage (`s3://bucket/prefix` or a local directory).
    pub fn for_stage(stage: &str, aws: Option<&AwsTarget>) -> Result<Self, StageDescriptorError> {
        let backend = match stage.strip_prefix("s3://") {
            Some(rest) => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(StageDescriptorError::NoBucket {
                        stage: stage.into(),
                    });
                }
                let aws = aws.ok_or_else(|| StageDescriptorError::NoRegion {
                    stage: stage.into(),
                })?;
                StageBackend::S3 {
                    bucket: bucket.into(),
                    prefix: prefix.trim_matches('/').into(),
                    region: aws.region.clone(),
                    endpoint: aws.s3_endpoint.clone(),
                }
            }
            None => StageBackend::Local { root: stage.into() },
        };
        Ok(Self {
            protocol_version: STAGE_PROTOCOL_VERSION,
            backend,
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        // A struct of strings always serialises.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Decodes a descriptor: the version is checked first, so a future version with another
    /// shape is reported as a version mismatch, not as a malformed document.
    pub fn decode(bytes: &[u8]) -> Result<Self, StageDescriptorError> {
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| StageDescriptorError::Json(e.to_string()))?;
        let version = value
            .get("protocol_version")
            .ok_or(StageDescriptorError::MissingVersion)?;
        match version.as_u64() {
            Some(v) if v == u64::from(STAGE_PROTOCOL_VERSION) => {}
            Some(found) => return Err(StageDescriptorError::UnsupportedVersion { found }),
            None => {
                return Err(StageDescriptorError::Malformed(format!(
                    "protocol_version must be a non-negative integer, not {version}"
                )));
            }
        }
        serde_json::from_value(value).map_err(|e| StageDescriptorError::Malformed(e.to_string()))
    }
}

/// A path inside the stage: relative, `/`-separated, no `.`/`..` segments, no empty segments,
/// no backslashes or control characters. It cannot name anything outside the stage prefix.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StagePath(String);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid stage path {path:?}: {reason}")]
pub struct StagePathError {
    pub path: String,
    pub reason: &'static str,
}

impl StagePath {
    pub fn parse(path: &str) -> Result<Self, StagePathError> {
        let fail = |reason| {
            Err(StagePathError {
                path: path.into(),
                reason,
            })
        };
        if path.is_empty() {
            return fail("it is empty");
        }
        if path.starts_with('/') {
            return fail("absolute paths are not allowed; stage paths are relative to the stage");
        }
        if path.contains('\\') {
            return fail("backslashes are not allowed");
        }
        if path.chars().any(char::is_control) {
            return fail("control characters are not allowed");
        }
        for segment in path.split('/') {
            match segment {
                ".." => return fail("`..` would leave the stage"),
                "." => return fail("`.` segments are not allowed"),
                "" => return fail("empty segments (`//` or a trailing `/`) are not allowed"),
                _ => {}
            }
        }
        Ok(Self(path.into()))
    }

    /// A listing prefix: like a path, but empty (the whole stage) and a trailing `/` are fine.
    pub fn parse_prefix(prefix: &str) -> Result<Option<Self>, StagePathError> {
        let trimmed = prefix.strip_suffix('/').unwrap_or(prefix);
        if trimmed.is_empty() {
            return if prefix.is_empty() {
                Ok(None)
            } else {
                Err(StagePathError {
                    path: prefix.into(),
                    reason: "absolute paths are not allowed; stage paths are relative to the stage",
                })
            };
        }
        Self::parse(trimmed).map(Some)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for StagePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn s3() -> StageDescriptor {
        StageDescriptor::for_stage(
            "s3://bucket/wh/_stage",
            Some(&AwsTarget {
                region: "eu-west-1".into(),
                dynamodb_endpoint: None,
                s3_endpoint: Some("http://127.0.0.1:9000".into()),
            }),
        )
        .unwrap()
    }

    #[test]
    fn managed_stage_descriptors_roundtrip_without_credentials() {
        let local = StageDescriptor::for_stage("/data/lake/_stage", None).unwrap();
        for descriptor in [s3(), local] {
            let bytes = descriptor.encode();
            assert_eq!(StageDescriptor::decode(&bytes).unwrap(), descriptor);
            let text = String::from_utf8(bytes).unwrap().to_lowercase();
            for secret in ["secret", "token", "password", "access_key", "credential"] {
                assert!(!text.contains(secret), "{text} mentions {secret}");
            }
        }
        assert_eq!(
            s3().backend,
            StageBackend::S3 {
                bucket: "bucket".into(),
                prefix: "wh/_stage".into(),
                region: "eu-west-1".into(),
                endpoint: Some("http://127.0.0.1:9000".into()),
            }
        );
        // A credential smuggled in is refused, not carried along.
        let smuggled = br#"{"protocol_version":1,"backend":{"type":"s3","bucket":"b","prefix":"","region":"r","secret_access_key":"x"}}"#;
        assert!(matches!(
            StageDescriptor::decode(smuggled),
            Err(StageDescriptorError::Malformed(m)) if m.contains("secret_access_key")
        ));
    }

    #[test]
    fn managed_stage_rejects_unsupported_protocol_version() {
        let future = br#"{"protocol_version":2,"backend":{"type":"gcs","bucket":"b"}}"#;
        assert_eq!(
            StageDescriptor::decode(future),
            Err(StageDescriptorError::UnsupportedVersion { found: 2 })
        );
        assert_eq!(
            StageDescriptor::decode(br#"{"backend":{"type":"local","root":"/x"}}"#),
            Err(StageDescriptorError::MissingVersion)
        );
        assert!(matches!(
            StageDescriptor::decode(br#"{"protocol_version":"1","backend":{}}"#),
            Err(StageDescriptorError::Malformed(_))
        ));
        assert!(matches!(
            StageDescriptor::decode(b"not json"),
            Err(StageDescriptorError::Json(_))
        ));
    }

    #[test]
    fn s3_stage_needs_bucket_and_region() {
        assert!(matches!(
            StageDescriptor::for_stage("s3:///x", None),
            Err(StageDescriptorError::NoBucket { .. })
        ));
        assert!(matches!(
            StageDescriptor::for_stage("s3://b/x", None),
            Err(StageDescriptorError::NoRegion { .. })
        ));
    }

    #[test]
    fn stage_paths_cannot_leave_the_stage() {
        for ok in ["a", "a/b.parquet", "dir/sub/file.csv", "..a", "a..b/c"] {
            assert!(StagePath::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a/..",
            "./a",
            "a//b",
            "a/",
            "a\\..\\b",
            "a\nb",
        ] {
            let err = StagePath::parse(bad).unwrap_err();
            assert_eq!(err.path, bad);
        }
        assert_eq!(StagePath::parse_prefix("").unwrap(), None);
        assert_eq!(
            StagePath::parse_prefix("in/").unwrap().unwrap().as_str(),
            "in"
        );
        assert!(StagePath::parse_prefix("/").is_err());
        assert!(StagePath::parse_prefix("../").is_err());
    }

    fn json() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_map(serde_json::Value::from),
            "[a-z_]{0,12}".prop_map(serde_json::Value::from),
            Just(serde_json::Value::from("protocol_version")),
            Just(serde_json::Value::from(1)),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("protocol_version".to_owned()),
                        Just("backend".to_owned()),
                        Just("type".to_owned()),
                        Just("root".to_owned()),
                        Just("bucket".to_owned()),
                        "[a-z_]{1,8}"
                    ],
                    inner,
                    0..6
                )
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn arbitrary_json_never_panics_the_decoder(value in json()) {
            let _ = StageDescriptor::decode(value.to_string().as_bytes());
        }

        #[test]
        fn arbitrary_bytes_never_panic_the_decoder(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = StageDescriptor::decode(&bytes);
        }

        #[test]
        fn parsed_stage_paths_never_escape(path in "[a-z./\\\\]{0,16}") {
            if let Ok(p) = StagePath::parse(&path) {
                prop_assert!(!p.as_str().starts_with('/'));
                prop_assert!(p.as_str().split('/').all(|s| s != ".." && s != "." && !s.is_empty()));
            }
        }
    }
}
