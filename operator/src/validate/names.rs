//! The Kubernetes name and quantity formats a spec's fields must have.

/// A Kubernetes namespace name (an RFC 1123 label).
pub(super) fn is_dns_label(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// A Kubernetes quantity as a claim's size: digits, an optional fraction, a binary or decimal
/// suffix (`500Mi`, `1.5Gi`, `10G`).
pub(super) fn is_quantity(value: &str) -> bool {
    let number_end = value
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(value.len());
    let (number, suffix) = value.split_at(number_end);
    let mut parts = number.split('.');
    let whole = parts.next().unwrap_or_default();
    let fraction = parts.next();
    !whole.is_empty()
        && whole.chars().all(|c| c.is_ascii_digit())
        && fraction.is_none_or(|f| !f.is_empty())
        && parts.next().is_none()
        && [
            "", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "T", "P", "E",
        ]
        .contains(&suffix)
        && number.chars().any(|c| c != '0' && c != '.')
}

/// A StorageClass name (an RFC 1123 subdomain).
pub(super) fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns_label)
}
