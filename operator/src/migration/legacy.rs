//! The lake v1 shared table, item by item: what each item is and what it becomes in the split
//! tables. Pure.
//!
//! A v1 table holds, under the manifest key schema (`base_uri` S, `version` N):
//! - Lance manifest rows — copied verbatim into the manifest table;
//! - one latest pointer per dataset: `base_uri = "<dataset>#latest"`, `version = 0`, attribute
//!   `latest` (N) — not copied (the manifest table's newest row is the latest version), but
//!   verified against;
//! - registry rows: `base_uri = "__registry__/<pk>/<sk>"`, `version = 0`, attributes `pk` and
//!   `sk` (S) and the registry item's own — copied into the registry table without `base_uri`
//!   and `version`.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use sha2::{Digest, Sha256};

pub type Item = std::collections::HashMap<String, AttributeValue>;

pub const REGISTRY_PREFIX: &str = "__registry__/";
pub const POINTER_SUFFIX: &str = "#latest";
/// The pointer's attribute holding the dataset's latest version.
pub const POINTER_LATEST: &str = "latest";
const MARKER_PREFIX: &str = "__lake__/";

/// What one legacy item is.
#[derive(Debug, Clone, PartialEq)]
pub enum LegacyItem {
    /// Goes to the manifest table as it is.
    Manifest(Item),
    /// Goes to the registry table (already converted).
    Registry(Item),
    /// A dataset's latest version, checked after the copy.
    Pointer { dataset: String, latest: i64 },
    /// A lake marker (a v2 table was named as the source?): not copied.
    Marker,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LegacyError {
    #[error("legacy item {key} has no {attribute} attribute of type {kind}")]
    Attribute {
        key: String,
        attribute: &'static str,
        kind: &'static str,
    },
}

fn string<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    item.get(name)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

fn number(item: &Item, name: &str) -> Option<i64> {
    item.get(name)
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse().ok())
}

/// A printable key, for messages.
pub fn describe(item: &Item) -> String {
    format!(
        "(base_uri {:?}, version {})",
        string(item, "base_uri").unwrap_or("?"),
        number(item, "version").map_or("?".to_owned(), |v| v.to_string())
    )
}

/// A key of either table (`base_uri`/`version` or `pk`/`sk`), for messages.
pub fn describe_key(key: &Item) -> String {
    let sorted: BTreeMap<&String, &AttributeValue> = key.iter().collect();
    let parts: Vec<String> = sorted
        .into_iter()
        .map(|(k, v)| match v {
            AttributeValue::S(s) => format!("{k} {s:?}"),
            AttributeValue::N(n) => format!("{k} {n}"),
            other => format!("{k} {other:?}"),
        })
        .collect();
    format!("({})", parts.join(", "))
}

pub fn classify(item: &Item) -> Result<LegacyItem, LegacyError> {
    let missing = |attribute, kind| LegacyError::Attribute {
        key: describe(item),
        attribute,
        kind,
    };
    let base_uri = string(item, "base_uri").ok_or_else(|| missing("base_uri", "S"))?;
    let version = number(item, "version").ok_or_else(|| missing("version", "N"))?;
    if base_uri.starts_with(MARKER_PREFIX) {
        return Ok(LegacyItem::Marker);
    }
    if base_uri.starts_with(REGISTRY_PREFIX) {
        string(item, "pk").ok_or_else(|| missing("pk", "S"))?;
        string(item, "sk").ok_or_else(|| missing("sk", "S"))?;
        let mut converted = item.clone();
        converted.remove("base_uri");
        converted.remove("version");
        return Ok(LegacyItem::Registry(converted));
    }
    if let Some(dataset) = base_uri.strip_suffix(POINTER_SUFFIX)
        && version == 0
    {
        let latest = number(item, POINTER_LATEST).ok_or_else(|| missing(POINTER_LATEST, "N"))?;
        return Ok(LegacyItem::Pointer {
            dataset: dataset.to_owned(),
            latest,
        });
    }
    Ok(LegacyItem::Manifest(item.clone()))
}

/// One attribute value, canonically (sets sorted, maps by key), for digests and comparison.
fn canonical(value: &AttributeValue, out: &mut Vec<u8>) {
    let mut tagged = |tag: u8, bytes: &[u8]| {
        out.push(tag);
        out.extend((bytes.len() as u64).to_be_bytes());
        out.extend(bytes);
    };
    match value {
        AttributeValue::S(s) => tagged(b's', s.as_bytes()),
        AttributeValue::N(n) => tagged(b'n', n.as_bytes()),
        AttributeValue::B(b) => tagged(b'b', b.as_ref()),
        AttributeValue::Bool(b) => tagged(b'?', &[u8::from(*b)]),
        AttributeValue::Null(_) => tagged(b'0', &[]),
        AttributeValue::Ss(v) | AttributeValue::Ns(v) => {
            let mut v = v.clone();
            v.sort();
            tagged(b'S', v.join("\u{0}").as_bytes());
        }
        AttributeValue::Bs(v) => {
            let mut v: Vec<&[u8]> = v.iter().map(|b| b.as_ref()).collect();
            v.sort();
            tagged(b'B', &v.concat());
        }
        AttributeValue::L(items) => {
            out.push(b'[');
            for item in items {
                canonical(item, out);
            }
            out.push(b']');
        }
        AttributeValue::M(map) => {
            out.push(b'{');
            let sorted: BTreeMap<&String, &AttributeValue> = map.iter().collect();
            for (k, v) in sorted {
                canonical(&AttributeValue::S(k.clone()), out);
                canonical(v, out);
            }
            out.push(b'}');
        }
        _ => tagged(b'?', b"unknown"),
    }
}

/// The item's content digest (attribute order does not matter).
pub fn item_digest(item: &Item) -> u64 {
    let mut bytes = Vec::new();
    canonical(&AttributeValue::M(item.clone()), &mut bytes);
    let hash = Sha256::digest(&bytes);
    u64::from_be_bytes(hash[..8].try_into().unwrap_or_default())
}

/// An order-independent digest of a set of items: the wrapping sum of their digests, as hex.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetDigest(pub u64);

impl SetDigest {
    pub fn add(&mut self, item: &Item) {
        self.0 = self.0.wrapping_add(item_digest(item));
    }

    pub fn hex(self) -> String {
        format!("{:016x}", self.0)
    }

    pub fn parse(hex: &str) -> Option<Self> {
        u64::from_str_radix(hex, 16).ok().map(SetDigest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(pairs: &[(&str, AttributeValue)]) -> Item {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }
    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.into())
    }
    fn n(v: i64) -> AttributeValue {
        AttributeValue::N(v.to_string())
    }

    #[test]
    fn each_kind_of_legacy_item_is_told_apart() {
        let manifest = item(&[
            ("base_uri", s("b/wh/sales/orders.lance")),
            ("version", n(3)),
            ("path", s("b/wh/sales/orders.lance/_versions/3.manifest")),
        ]);
        assert_eq!(
            classify(&manifest),
            Ok(LegacyItem::Manifest(manifest.clone()))
        );
        let pointer = item(&[
            ("base_uri", s("b/wh/sales/orders.lance#latest")),
            ("version", n(0)),
            ("latest", n(3)),
        ]);
        assert_eq!(
            classify(&pointer),
            Ok(LegacyItem::Pointer {
                dataset: "b/wh/sales/orders.lance".into(),
                latest: 3
            })
        );
        let registry = item(&[
            ("base_uri", s("__registry__/NS#sales/META")),
            ("version", n(0)),
            ("pk", s("NS#sales")),
            ("sk", s("META")),
            ("created", n(7)),
        ]);
        assert_eq!(
            classify(&registry),
            Ok(LegacyItem::Registry(item(&[
                ("pk", s("NS#sales")),
                ("sk", s("META")),
                ("created", n(7))
            ])))
        );
        let broken = item(&[("base_uri", s("__registry__/x")), ("version", n(0))]);
        assert!(classify(&broken).unwrap_err().to_string().contains("pk"));
        let pointer_without_latest = item(&[("base_uri", s("d#latest")), ("version", n(0))]);
        assert!(classify(&pointer_without_latest).is_err());
    }

    #[test]
    fn digests_ignore_order_and_see_every_change() {
        let a = item(&[("base_uri", s("x")), ("version", n(1)), ("path", s("p"))]);
        let b = item(&[("path", s("p")), ("version", n(1)), ("base_uri", s("x"))]);
        assert_eq!(item_digest(&a), item_digest(&b));
        let c = item(&[("base_uri", s("x")), ("version", n(1)), ("path", s("q"))]);
        assert_ne!(item_digest(&a), item_digest(&c));
        let (mut one, mut two) = (SetDigest::default(), SetDigest::default());
        one.add(&a);
        one.add(&c);
        two.add(&c);
        two.add(&a);
        assert_eq!(one, two);
        assert_eq!(SetDigest::parse(&one.hex()), Some(one));
    }
}
