//! Unknown-field detection against the CRD's own OpenAPI schema.
//!
//! serde ignores unknown fields and the API server prunes them, so a typo such as `tabels:` would
//! silently fall back to defaults. `render` reads files directly, so it checks them here.

use serde_json::Value;

/// Paths (e.g. `spec.tabels`) present in `value` but not allowed by `schema`.
pub fn unknown_fields(value: &Value, schema: &Value) -> Vec<String> {
    let mut found = Vec::new();
    walk(value, schema, "", &mut found);
    found
}

fn walk(value: &Value, schema: &Value, path: &str, found: &mut Vec<String>) {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return;
    }
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            for (key, child) in map {
                let child_path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match (properties.and_then(|p| p.get(key)), additional) {
                    (Some(child_schema), _) => walk(child, child_schema, &child_path, found),
                    (None, Some(Value::Object(_))) => walk(
                        child,
                        additional.unwrap_or(&Value::Null),
                        &child_path,
                        found,
                    ),
                    (None, Some(Value::Bool(true))) => {}
                    (None, _) if properties.is_some() => found.push(child_path),
                    // A schema that does not describe an object's fields (e.g. int-or-string).
                    (None, _) => {}
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    walk(item, item_schema, &format!("{path}[{i}]"), found);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_typos_at_any_depth() {
        let schema = json!({"properties": {
            "spec": {"properties": {
                "tables": {"properties": {"registry": {"type": "string"}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "list": {"type": "array", "items": {"properties": {"a": {}}}}
            }}
        }});
        let value = json!({"spec": {
            "tabels": {},
            "tables": {"registry": "x", "manifests": "y"},
            "labels": {"anything": "goes"},
            "list": [{"a": 1}, {"b": 2}]
        }});
        assert_eq!(
            unknown_fields(&value, &schema),
            ["spec.list[1].b", "spec.tabels", "spec.tables.manifests"]
        );
    }
}
