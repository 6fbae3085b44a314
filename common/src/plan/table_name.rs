//! DynamoDB table names, one newtype per authority.
//!
//! The registry and the manifest table hold different authorities with different IAM grants, so
//! their names are different types: a `ManifestTableName` cannot be passed where a
//! `RegistryTableName` is wanted, and neither can a raw `String`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// DynamoDB's limits on a table name.
pub const MIN_TABLE_NAME_LEN: usize = 3;
pub const MAX_TABLE_NAME_LEN: usize = 255;

/// Why a string is not a valid DynamoDB table name. Every variant names the field it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableNameError {
    #[error(
        "{field}: table name {value:?} is {len} characters; DynamoDB table names have {MIN_TABLE_NAME_LEN} to {MAX_TABLE_NAME_LEN}"
    )]
    Length {
        field: String,
        value: String,
        len: usize,
    },
    #[error(
        "{field}: table name {value:?} contains {found:?}; DynamoDB table names use only A-Z, a-z, 0-9, '_', '-' and '.'"
    )]
    Character {
        field: String,
        value: String,
        found: char,
    },
}

impl TableNameError {
    /// The spec or configuration field the bad name came from.
    pub fn field(&self) -> &str {
        match self {
            Self::Length { field, .. } | Self::Character { field, .. } => field,
        }
    }
}

/// Checks `value` against DynamoDB's table-name rules: 3–255 characters of `[A-Za-z0-9_.-]`.
fn check(field: &str, value: &str) -> Result<(), TableNameError> {
    if let Some(found) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        return Err(TableNameError::Character {
            field: field.to_owned(),
            value: value.to_owned(),
            found,
        });
    }
    // Only ASCII is left, so bytes are characters.
    let len = value.len();
    if !(MIN_TABLE_NAME_LEN..=MAX_TABLE_NAME_LEN).contains(&len) {
        return Err(TableNameError::Length {
            field: field.to_owned(),
            value: value.to_owned(),
            len,
        });
    }
    Ok(())
}

macro_rules! table_name {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Validates `value`; errors name `field` (e.g. `spec.tables.manifest`).
            pub fn parse(field: &str, value: &str) -> Result<Self, TableNameError> {
                check(field, value)?;
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

        impl TryFrom<String> for $name {
            type Error = TableNameError;
            fn try_from(value: String) -> Result<Self, Self::Error> {
                check(stringify!($name), &value)?;
                Ok(Self(value))
            }
        }

        impl From<$name> for String {
            fn from(name: $name) -> String {
                name.0
            }
        }
    };
}

table_name!(
    /// The catalog registry table: namespaces, tables, schemas. Only metadata may name it.
    RegistryTableName
);
table_name!(
    /// The Lance manifest table: one row per dataset version. Metadata writes it, query reads it.
    ManifestTableName
);
table_name!(
    /// The lake v1 shared table a migration copies from. Never written, never served.
    LegacyTableName
);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_dynamodb_names() {
        for ok in ["abc", "a.b-c_D9", &"x".repeat(255)] {
            assert_eq!(ManifestTableName::parse("f", ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn rejects_with_field_and_rule() {
        let err = RegistryTableName::parse("spec.tables.registry", "ab").unwrap_err();
        assert_eq!(err.field(), "spec.tables.registry");
        assert!(err.to_string().contains("2 characters"), "{err}");

        let err = ManifestTableName::parse("spec.tables.manifest", "my table").unwrap_err();
        assert_eq!(
            err,
            TableNameError::Character {
                field: "spec.tables.manifest".into(),
                value: "my table".into(),
                found: ' '
            }
        );
        assert!(err.to_string().contains("spec.tables.manifest"), "{err}");

        let long = "y".repeat(256);
        assert!(matches!(
            ManifestTableName::parse("f", &long),
            Err(TableNameError::Length { len: 256, .. })
        ));
    }

    #[test]
    fn multibyte_names_are_rejected_by_character_not_length() {
        // 'é' is two bytes; it must be reported as a bad character, not miscounted as length.
        let err = RegistryTableName::parse("f", "café").unwrap_err();
        assert!(matches!(err, TableNameError::Character { found: 'é', .. }));
    }

    #[test]
    fn serde_validates() {
        let name: ManifestTableName = serde_json::from_str("\"lake-manifests\"").unwrap();
        assert_eq!(name.as_str(), "lake-manifests");
        assert!(serde_json::from_str::<ManifestTableName>("\"a\"").is_err());
    }

    fn is_valid(s: &str) -> bool {
        (3..=255).contains(&s.chars().count())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
    }

    proptest! {
        #[test]
        fn valid_names_are_accepted(name in "[A-Za-z0-9_.-]{3,255}") {
            let parsed = RegistryTableName::parse("f", &name).unwrap();
            prop_assert_eq!(parsed.as_str(), name.as_str());
            prop_assert!(ManifestTableName::parse("f", &name).is_ok());
        }

        #[test]
        fn arbitrary_strings_never_panic_and_agree_with_the_rule(name in any::<String>()) {
            let parsed = ManifestTableName::parse("spec.tables.manifest", &name);
            prop_assert_eq!(parsed.is_ok(), is_valid(&name));
            if let Err(e) = parsed {
                prop_assert_eq!(e.field(), "spec.tables.manifest");
            }
        }

        #[test]
        fn near_misses_are_rejected(
            prefix in "[A-Za-z0-9_.-]{0,10}",
            bad in "[^A-Za-z0-9_.-]",
            suffix in "[A-Za-z0-9_.-]{0,10}",
        ) {
            let name = format!("{prefix}{bad}{suffix}");
            prop_assert!(RegistryTableName::parse("f", &name).is_err());
        }

        #[test]
        fn wrong_lengths_are_rejected(name in "[a-z]{0,2}|[a-z]{256,300}") {
            let is_length_error = matches!(
                ManifestTableName::parse("f", &name),
                Err(TableNameError::Length { .. })
            );
            prop_assert!(is_length_error);
        }
    }
}
