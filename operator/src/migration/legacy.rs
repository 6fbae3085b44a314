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
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LegacyError {
    #[error("legacy item {key} has no {attribute} attribute holding {kind}")]
    Attribute {
        key: String,
        attribute: &'static str,
        kind: &'static str,
    },
    #[error(
        "legacy item {key} is a lake v2 marker: the source is a v2 table (or one a cluster adopted), not a lake v1 one"
    )]
    Marker { key: String },
    #[error(
        "legacy registry item {key} does not match its pk {pk:?} and sk {sk:?} (its base_uri must be __registry__/<pk>/<sk>, and no pk may start with __lake__)"
    )]
    Registry { key: String, pk: String, sk: String },
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

/// The split manifest table's key attributes.
pub const MANIFEST_KEY: [&str; 2] = ["base_uri", "version"];
/// The split registry table's key attributes.
pub const REGISTRY_KEY: [&str; 2] = ["pk", "sk"];

/// The attributes `names` of `item`: its key in a table with that key schema.
pub fn key_of(item: &Item, names: [&str; 2]) -> Item {
    names
        .iter()
        .filter_map(|n| item.get(*n).map(|v| ((*n).to_owned(), v.clone())))
        .collect()
}

/// Whether `item` is a lake marker (of either table).
pub fn is_marker(item: &Item) -> bool {
    ["base_uri", "pk"]
        .iter()
        .any(|k| string(item, k).is_some_and(|s| s.starts_with("__lake__")))
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
    let base_uri = string(item, "base_uri").ok_or_else(|| missing("base_uri", "a string"))?;
    let version = number(item, "version").ok_or_else(|| missing("version", "an integer"))?;
    if base_uri.starts_with(MARKER_PREFIX) {
        return Err(LegacyError::Marker {
            key: describe(item),
        });
    }
    if base_uri.starts_with(REGISTRY_PREFIX) {
        let pk = string(item, "pk").ok_or_else(|| missing("pk", "a string"))?;
        let sk = string(item, "sk").ok_or_else(|| missing("sk", "a string"))?;
        // One legacy row per registry key (two could not both be copied), and never over the
        // split registry's own marker.
        if base_uri != format!("{REGISTRY_PREFIX}{pk}/{sk}") || pk.starts_with("__lake__") {
            return Err(LegacyError::Registry {
                key: describe(item),
                pk: pk.to_owned(),
                sk: sk.to_owned(),
            });
        }
        let mut converted = item.clone();
        converted.remove("base_uri");
        converted.remove("version");
        return Ok(LegacyItem::Registry(converted));
    }
    if let Some(dataset) = base_uri.strip_suffix(POINTER_SUFFIX)
        && version == 0
    {
        let latest =
            number(item, POINTER_LATEST).ok_or_else(|| missing(POINTER_LATEST, "an integer"))?;
        return Ok(LegacyItem::Pointer {
            dataset: dataset.to_owned(),
            latest,
        });
    }
    Ok(LegacyItem::Manifest(item.clone()))
}

/// The latest pointer of `dataset` (what a v1 table held beside the manifest rows).
pub fn pointer(dataset: &str, latest: i64) -> Item {
    Item::from([
        (
            "base_uri".to_owned(),
            AttributeValue::S(format!("{dataset}{POINTER_SUFFIX}")),
        ),
        ("version".to_owned(), AttributeValue::N("0".into())),
        (
            POINTER_LATEST.to_owned(),
            AttributeValue::N(latest.to_string()),
        ),
    ])
}

/// A v2 registry item as the v1 table held it; `None` without a string `pk` and `sk`.
pub fn registry_row(item: &Item) -> Option<Item> {
    let pk = item.get("pk")?.as_s().ok()?;
    let sk = item.get("sk")?.as_s().ok()?;
    let mut row = item.clone();
    row.insert(
        "base_uri".to_owned(),
        AttributeValue::S(format!("{REGISTRY_PREFIX}{pk}/{sk}")),
    );
    row.insert("version".to_owned(), AttributeValue::N("0".into()));
    Some(row)
}

/// One attribute value, canonically: tagged by type, every string and element length-prefixed
/// (sets sorted, maps by key), for digests and comparison.
fn canonical(value: &AttributeValue, out: &mut Vec<u8>) {
    fn bytes(out: &mut Vec<u8>, tag: u8, bytes: &[u8]) {
        out.push(tag);
        out.extend((bytes.len() as u64).to_be_bytes());
        out.extend(bytes);
    }
    fn set<'a>(out: &mut Vec<u8>, tag: u8, elements: impl Iterator<Item = &'a [u8]>) {
        let mut elements: Vec<&[u8]> = elements.collect();
        elements.sort();
        out.push(tag);
        out.extend((elements.len() as u64).to_be_bytes());
        for element in elements {
            bytes(out, b'e', element);
        }
    }
    match value {
        AttributeValue::S(s) => bytes(out, b's', s.as_bytes()),
        AttributeValue::N(n) => bytes(out, b'n', n.as_bytes()),
        AttributeValue::B(b) => bytes(out, b'b', b.as_ref()),
        AttributeValue::Bool(b) => bytes(out, b'?', &[u8::from(*b)]),
        AttributeValue::Null(_) => bytes(out, b'0', &[]),
        AttributeValue::Ss(v) => set(out, b'S', v.iter().map(|s| s.as_bytes())),
        AttributeValue::Ns(v) => set(out, b'N', v.iter().map(|s| s.as_bytes())),
        AttributeValue::Bs(v) => set(out, b'B', v.iter().map(|b| b.as_ref())),
        AttributeValue::L(items) => {
            out.push(b'[');
            out.extend((items.len() as u64).to_be_bytes());
            for item in items {
                canonical(item, out);
            }
        }
        AttributeValue::M(map) => {
            out.push(b'{');
            out.extend((map.len() as u64).to_be_bytes());
            let sorted: BTreeMap<&String, &AttributeValue> = map.iter().collect();
            for (k, v) in sorted {
                bytes(out, b'k', k.as_bytes());
                canonical(v, out);
            }
        }
        other => bytes(out, b'!', format!("{other:?}").as_bytes()),
    }
}

/// The item's content digest (attribute order does not matter): 128 bits of SHA-256.
pub fn item_digest(item: &Item) -> u128 {
    let mut bytes = Vec::new();
    canonical(&AttributeValue::M(item.clone()), &mut bytes);
    let hash = Sha256::digest(&bytes);
    u128::from_be_bytes(hash[..16].try_into().unwrap_or_default())
}

/// An order-independent digest of a set of items: the wrapping sum of their digests, as hex.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetDigest(pub u128);

impl SetDigest {
    pub fn add(&mut self, item: &Item) {
        self.0 = self.0.wrapping_add(item_digest(item));
    }

    /// The digest of both sets together.
    pub fn merge(&mut self, other: SetDigest) {
        self.0 = self.0.wrapping_add(other.0);
    }

    pub fn hex(self) -> String {
        format!("{:032x}", self.0)
    }

    pub fn parse(hex: &str) -> Option<Self> {
        u128::from_str_radix(hex, 16).ok().map(SetDigest)
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
        let elsewhere = item(&[
            ("base_uri", s("__registry__/NS#sales/OTHER")),
            ("version", n(0)),
            ("pk", s("NS#sales")),
            ("sk", s("META")),
        ]);
        assert!(matches!(
            classify(&elsewhere),
            Err(LegacyError::Registry { .. })
        ));
        let over_the_marker = item(&[
            ("base_uri", s("__registry__/__lake__/AUTHORITY")),
            ("version", n(0)),
            ("pk", s("__lake__")),
            ("sk", s("AUTHORITY")),
        ]);
        assert!(matches!(
            classify(&over_the_marker),
            Err(LegacyError::Registry { .. })
        ));
        let marker = item(&[("base_uri", s("__lake__/authority")), ("version", n(0))]);
        assert!(matches!(classify(&marker), Err(LegacyError::Marker { .. })));
        let pointer_without_latest = item(&[("base_uri", s("d#latest")), ("version", n(0))]);
        assert!(classify(&pointer_without_latest).is_err());
    }

    #[test]
    fn the_fixture_encodings_classify_back() {
        let registry = item(&[
            ("pk", s("NS#sales")),
            ("sk", s("TABLE#orders")),
            ("x", n(1)),
        ]);
        assert_eq!(
            classify(&registry_row(&registry).unwrap()),
            Ok(LegacyItem::Registry(registry))
        );
        assert_eq!(
            classify(&pointer("b/wh/s/t.lance", 9)),
            Ok(LegacyItem::Pointer {
                dataset: "b/wh/s/t.lance".into(),
                latest: 9
            })
        );
        assert_eq!(registry_row(&item(&[("pk", s("x"))])), None);
    }

    #[test]
    fn digests_ignore_order_and_see_every_change() {
        let a = item(&[("base_uri", s("x")), ("version", n(1)), ("path", s("p"))]);
        let b = item(&[("path", s("p")), ("version", n(1)), ("base_uri", s("x"))]);
        assert_eq!(item_digest(&a), item_digest(&b));
        let c = item(&[("base_uri", s("x")), ("version", n(1)), ("path", s("q"))]);
        assert_ne!(item_digest(&a), item_digest(&c));
        // Sets of different types, or split differently, are different content.
        let strings = item(&[("x", AttributeValue::Ss(vec!["1".into(), "2".into()]))]);
        let numbers = item(&[("x", AttributeValue::Ns(vec!["1".into(), "2".into()]))]);
        let joined = item(&[("x", AttributeValue::Ss(vec!["1\u{0}2".into()]))]);
        assert_ne!(item_digest(&strings), item_digest(&numbers));
        assert_ne!(item_digest(&strings), item_digest(&joined));
        let (mut one, mut two) = (SetDigest::default(), SetDigest::default());
        one.add(&a);
        one.add(&c);
        two.add(&c);
        two.add(&a);
        assert_eq!(one, two);
        assert_eq!(SetDigest::parse(&one.hex()), Some(one));
    }
}
