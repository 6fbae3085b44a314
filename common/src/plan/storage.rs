//! Where a lake keeps its data: an S3 prefix or a local directory, validated.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use super::PlanError;

/// The requested storage, as a user wrote it (unvalidated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageRequest {
    S3 {
        bucket: String,
        prefix: String,
        region: String,
        endpoint: Option<String>,
    },
    Local {
        path: String,
    },
}

/// Validated S3 location. `prefix` has no leading or trailing `/` and may be empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct S3Location {
    pub bucket: String,
    pub prefix: String,
    pub region: String,
    /// An S3-compatible endpoint (emulators, MinIO); `None` means AWS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

impl S3Location {
    /// `s3://bucket/prefix/child` (or `s3://bucket/child` with an empty prefix).
    pub fn url(&self, child: &str) -> String {
        let mut url = format!("s3://{}", self.bucket);
        for part in [self.prefix.as_str(), child] {
            if !part.is_empty() {
                url.push('/');
                url.push_str(part);
            }
        }
        url
    }

    /// The key prefix `prefix/child` inside the bucket, as IAM resources and Lance see it.
    pub fn key(&self, child: &str) -> String {
        if self.prefix.is_empty() {
            child.to_owned()
        } else {
            format!("{}/{child}", self.prefix)
        }
    }
}

/// Validated storage. Local storage means a whole lake in one directory, with embedded stores.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Storage {
    S3(S3Location),
    Local { path: PathBuf },
}

impl fmt::Display for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Storage::S3(s3) => write!(f, "{}", s3.url("")),
            Storage::Local { path } => write!(f, "{}", path.display()),
        }
    }
}

/// Field names used in storage errors, so that they name what the user wrote.
#[derive(Debug, Clone, Copy)]
pub struct StorageFields {
    pub bucket: &'static str,
    pub prefix: &'static str,
    pub region: &'static str,
    pub endpoint: &'static str,
    pub path: &'static str,
}

pub(crate) fn validate(
    request: &StorageRequest,
    fields: &StorageFields,
    errors: &mut Vec<PlanError>,
) -> Option<Storage> {
    let before = errors.len();
    let storage = match request {
        StorageRequest::S3 {
            bucket,
            prefix,
            region,
            endpoint,
        } => {
            check_bucket(fields.bucket, bucket, errors);
            let prefix = check_prefix(fields.prefix, prefix, errors);
            check_region(fields.region, region, errors);
            if let Some(endpoint) = endpoint {
                check_endpoint(fields.endpoint, endpoint, errors);
            }
            Storage::S3(S3Location {
                bucket: bucket.clone(),
                prefix,
                region: region.clone(),
                endpoint: endpoint.clone(),
            })
        }
        StorageRequest::Local { path } => {
            let p = Path::new(path);
            if !p.is_absolute() {
                errors.push(invalid(fields.path, path, "must be an absolute path"));
            } else if p.components().any(|c| c == Component::ParentDir) {
                errors.push(invalid(fields.path, path, "must not contain '..'"));
            }
            Storage::Local { path: p.into() }
        }
    };
    (errors.len() == before).then_some(storage)
}

fn invalid(field: &str, value: &str, reason: &str) -> PlanError {
    PlanError::InvalidField {
        field: field.to_owned(),
        value: value.to_owned(),
        reason: reason.to_owned(),
    }
}

/// S3 general-purpose bucket naming rules (the subset that matters for a path-style URL).
fn check_bucket(field: &str, bucket: &str, errors: &mut Vec<PlanError>) {
    let ok_chars = bucket
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    let ok_ends = bucket.starts_with(|c: char| c.is_ascii_alphanumeric())
        && bucket.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !(3..=63).contains(&bucket.len()) || !ok_chars || !ok_ends || bucket.contains("..") {
        errors.push(invalid(
            field,
            bucket,
            "must be an S3 bucket name: 3-63 characters of a-z, 0-9, '.' and '-', starting and ending with a letter or digit",
        ));
    }
}

/// Returns the prefix without surrounding slashes.
fn check_prefix(field: &str, prefix: &str, errors: &mut Vec<PlanError>) -> String {
    let trimmed = prefix.trim_matches('/');
    // The prefix becomes part of IAM resource ARNs and condition values, where `*` and `?` are
    // wildcards and `${…}` a policy variable: `*` would grant every prefix of the bucket.
    if let Some(c) = trimmed
        .chars()
        .find(|c| matches!(c, '*' | '?' | '$' | '{' | '}') || c.is_control())
    {
        errors.push(invalid(
            field,
            prefix,
            &format!("must not contain {c:?}: IAM would read it as a wildcard or policy variable"),
        ));
        return trimmed.to_owned();
    }
    if !trimmed.is_empty()
        && trimmed
            .split('/')
            .any(|seg| seg.is_empty() || seg == "." || seg == "..")
    {
        errors.push(invalid(
            field,
            prefix,
            "must be a key prefix without empty, '.' or '..' segments",
        ));
    }
    trimmed.to_owned()
}

fn check_region(field: &str, region: &str, errors: &mut Vec<PlanError>) {
    let ok = !region.is_empty()
        && region
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !ok {
        errors.push(invalid(
            field,
            region,
            "must be an AWS region such as eu-west-1",
        ));
    }
}

fn check_endpoint(field: &str, endpoint: &str, errors: &mut Vec<PlanError>) {
    let rest = endpoint
        .strip_prefix("https://")
        .or_else(|| endpoint.strip_prefix("http://"));
    if rest.is_none_or(|host| host.is_empty() || host.contains(char::is_whitespace)) {
        errors.push(invalid(
            field,
            endpoint,
            "must be an http:// or https:// URL",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: StorageFields = StorageFields {
        bucket: "bucket",
        prefix: "prefix",
        region: "region",
        endpoint: "endpoint",
        path: "path",
    };

    fn s3(bucket: &str, prefix: &str, region: &str, endpoint: Option<&str>) -> StorageRequest {
        StorageRequest::S3 {
            bucket: bucket.into(),
            prefix: prefix.into(),
            region: region.into(),
            endpoint: endpoint.map(Into::into),
        }
    }

    fn fields_in_error(request: &StorageRequest) -> Vec<String> {
        let mut errors = vec![];
        validate(request, &F, &mut errors);
        errors
            .iter()
            .map(|e| match e {
                PlanError::InvalidField { field, .. } => field.clone(),
                other => panic!("unexpected {other}"),
            })
            .collect()
    }

    #[test]
    fn s3_location_is_normalised() {
        let mut errors = vec![];
        let storage = validate(
            &s3("acme-lake", "/analytics/", "eu-west-1", None),
            &F,
            &mut errors,
        );
        let Some(Storage::S3(loc)) = storage else {
            panic!("{errors:?}")
        };
        assert_eq!(loc.prefix, "analytics");
        assert_eq!(loc.url("warehouse"), "s3://acme-lake/analytics/warehouse");
        assert_eq!(loc.key("stage"), "analytics/stage");
        let root = S3Location {
            prefix: String::new(),
            ..loc
        };
        assert_eq!(root.url("warehouse"), "s3://acme-lake/warehouse");
        assert_eq!(root.key("warehouse"), "warehouse");
    }

    #[test]
    fn every_bad_s3_field_is_named() {
        let bad = s3("Acme_Lake", "a//b", "EU WEST", Some("ftp://x"));
        assert_eq!(
            fields_in_error(&bad),
            ["bucket", "prefix", "region", "endpoint"]
        );
        assert_eq!(
            fields_in_error(&s3("ab", "", "us-east-1", None)),
            ["bucket"]
        );
        assert_eq!(
            fields_in_error(&s3(
                "abc",
                "x/../y",
                "us-east-1",
                Some("http://127.0.0.1:5000")
            )),
            ["prefix"]
        );
    }

    #[test]
    fn prefixes_with_iam_wildcards_or_variables_are_refused() {
        for prefix in ["*", "wh/*", "wh?", "${aws:username}", "wh/{x}", "a\nb"] {
            assert_eq!(
                fields_in_error(&s3("acme", prefix, "us-east-1", None)),
                ["prefix"],
                "{prefix:?}"
            );
        }
        assert!(fields_in_error(&s3("acme", "team-a/wh_1.x", "us-east-1", None)).is_empty());
    }

    #[test]
    fn local_path_must_be_absolute_and_plain() {
        let rel = StorageRequest::Local {
            path: "data".into(),
        };
        assert_eq!(fields_in_error(&rel), ["path"]);
        let up = StorageRequest::Local {
            path: "/var/../etc".into(),
        };
        assert_eq!(fields_in_error(&up), ["path"]);
        let ok = StorageRequest::Local {
            path: "/var/lib/lake".into(),
        };
        assert!(fields_in_error(&ok).is_empty());
    }
}
