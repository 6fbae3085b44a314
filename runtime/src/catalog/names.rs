//! Namespace and table names: SQL identifiers that are also path segments of the warehouse.

use std::fmt;

/// The longest namespace or table name.
pub const MAX_NAME_LEN: usize = 128;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} name {value:?} is invalid: {rule}")]
pub struct NameError {
    pub kind: &'static str,
    pub value: String,
    pub rule: &'static str,
}

fn check(kind: &'static str, value: &str) -> Result<(), NameError> {
    let err = |rule| NameError {
        kind,
        value: value.to_owned(),
        rule,
    };
    if value.is_empty() || value.len() > MAX_NAME_LEN {
        return Err(err("it must have 1 to 128 characters"));
    }
    if !value.starts_with(|c: char| c.is_ascii_lowercase()) {
        // '_' is reserved: `_stage` and `_lake` live beside the namespaces.
        return Err(err("it must start with a lowercase letter"));
    }
    if !value
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        return Err(err("it may contain only a-z, 0-9 and '_'"));
    }
    Ok(())
}

macro_rules! name {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            pub fn parse(value: &str) -> Result<Self, NameError> {
                check($kind, value)?;
                Ok(Self(value.to_owned()))
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

name!(
    /// A namespace (SQL schema): a directory of the warehouse.
    NamespaceName,
    "namespace"
);
name!(
    /// A table: a Lance dataset `<namespace>/<table>.lance`.
    TableName,
    "table"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lowercase_identifiers() {
        assert!(NamespaceName::parse("sales_2024").is_ok());
        for bad in ["", "_stage", "Sales", "9lives", "a-b", "a.b", "a b", "ü"] {
            let err = NamespaceName::parse(bad).unwrap_err();
            assert_eq!(err.kind, "namespace");
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
        assert!(TableName::parse(&"t".repeat(128)).is_ok());
        assert!(TableName::parse(&"t".repeat(129)).is_err());
    }
}
