//! Keys, values and items of the MetaStore, independent of the backend.

use std::collections::BTreeMap;
use std::fmt;

/// A sort key: a number (manifest versions) or a string (registry rows).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SortKey {
    N(u64),
    S(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    pub partition: String,
    pub sort: SortKey,
}

impl Key {
    pub fn new(partition: impl Into<String>, sort: SortKey) -> Self {
        Self {
            partition: partition.into(),
            sort,
        }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.sort {
            SortKey::N(n) => write!(f, "({:?}, {n})", self.partition),
            SortKey::S(s) => write!(f, "({:?}, {s:?})", self.partition),
        }
    }
}

/// A non-key attribute.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Value {
    S(String),
    N(i64),
    B(Vec<u8>),
    Bool(bool),
}

pub type Attributes = BTreeMap<String, Value>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub key: Key,
    pub attributes: Attributes,
}

impl Item {
    pub fn new(key: Key) -> Self {
        Self {
            key,
            attributes: Attributes::new(),
        }
    }

    pub fn with(mut self, name: &str, value: Value) -> Self {
        self.attributes.insert(name.to_owned(), value);
        self
    }

    pub fn string(&self, name: &str) -> Option<&str> {
        match self.attributes.get(name) {
            Some(Value::S(s)) => Some(s),
            _ => None,
        }
    }

    pub fn number(&self, name: &str) -> Option<i64> {
        match self.attributes.get(name) {
            Some(Value::N(n)) => Some(*n),
            _ => None,
        }
    }

    pub fn bytes(&self, name: &str) -> Option<&[u8]> {
        match self.attributes.get(name) {
            Some(Value::B(b)) => Some(b),
            _ => None,
        }
    }
}
