//! Session options (Flight's `SetSessionOptions`, `GetSessionOptions`, `CloseSession`), per
//! connection: the schema unqualified table names resolve in (ADBC's
//! `adbc.connection.db_schema`), and lake's settings (`lake.vector.nprobes`, …: ADBC's
//! `adbc.flight.sql.session.option.<name>`).
//!
//! lake keeps no session state: the options travel in a cookie the client sends back on every
//! call (ADBC with `adbc.flight.sql.rpc.with_cookie_middleware`), so the next call may land on
//! any replica. The cookie is not secret and need not be signed: it only chooses a default name
//! resolution the client could spell out itself, and it is checked like SQL on every call.

use std::collections::{BTreeMap, HashMap};

use tonic::Status;
use tonic::metadata::MetadataMap;

use crate::catalog::NamespaceName;

use super::catalog::CATALOG;
use super::search::{SettingError, check_setting};

/// The cookie that carries the session's schema.
const SCHEMA_COOKIE: &str = "lake_schema";
/// The option names ADBC and the JDBC driver use.
const SCHEMA: &str = "schema";
const CATALOG_OPTION: &str = "catalog";
/// lake's settings are options (and cookies) of their own name.
const SETTINGS: &str = "lake.";
/// At most this many cookies of a call are looked at, and options of one SetSessionOptions.
const MAX_COOKIES: usize = 64;
/// The largest SetSessionOptions request read.
const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// lake's cookies in a call's `cookie` headers (`lake_schema` and `lake.*`), non-empty, as
/// (name, value), at most [`MAX_COOKIES`] of all cookies looked at. A cookie that is not text
/// (another application's, in the same header) is skipped, not the header.
fn lake_cookies(metadata: &MetadataMap) -> Vec<(String, String)> {
    let pairs = metadata
        .get_all("cookie")
        .iter()
        .flat_map(|header| header.as_bytes().split(|b| *b == b';'))
        .take(MAX_COOKIES);
    let mut found: Vec<(String, String)> = Vec::new();
    for pair in pairs {
        let Ok(pair) = std::str::from_utf8(pair) else {
            continue;
        };
        let Some((name, value)) = pair.trim().split_once('=') else {
            continue;
        };
        let ours = name == SCHEMA_COOKIE || name.starts_with(SETTINGS);
        if ours && !value.is_empty() && !found.iter().any(|(n, _)| n == name) {
            found.push((name.to_owned(), value.to_owned()));
        }
    }
    found
}

/// The messages of Flight.proto's session options (arrow-flight 58 does not generate them).
mod proto {
    use std::collections::HashMap;

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct SessionOptionValue {
        #[prost(oneof = "Value", tags = "1, 2, 3, 4, 5")]
        pub(super) value: Option<Value>,
    }

    #[derive(Clone, PartialEq, prost::Oneof)]
    pub(super) enum Value {
        #[prost(string, tag = "1")]
        String(String),
        #[prost(bool, tag = "2")]
        Bool(bool),
        #[prost(sfixed64, tag = "3")]
        Int64(i64),
        #[prost(double, tag = "4")]
        Double(f64),
        #[prost(message, tag = "5")]
        StringList(StringListValue),
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct StringListValue {
        #[prost(string, repeated, tag = "1")]
        pub(super) values: Vec<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct SetSessionOptionsRequest {
        #[prost(map = "string, message", tag = "1")]
        pub(super) session_options: HashMap<String, SessionOptionValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct SetSessionOptionsResult {
        #[prost(map = "string, message", tag = "1")]
        pub(super) errors: HashMap<String, SetSessionOptionsError>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct SetSessionOptionsError {
        #[prost(enumeration = "ErrorValue", tag = "1")]
        pub(super) value: i32,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
    #[repr(i32)]
    pub(super) enum ErrorValue {
        Unspecified = 0,
        InvalidName = 1,
        InvalidValue = 2,
        Error = 3,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct GetSessionOptionsResult {
        #[prost(map = "string, message", tag = "1")]
        pub(super) session_options: HashMap<String, SessionOptionValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct CloseSessionResult {
        #[prost(enumeration = "CloseStatus", tag = "1")]
        pub(super) status: i32,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
    #[repr(i32)]
    pub(super) enum CloseStatus {
        Unspecified = 0,
        Closed = 1,
        Closing = 2,
        NotCloseable = 3,
    }
}

use proto::{ErrorValue, SessionOptionValue, Value};

/// What a call's session chose: the schema unqualified names resolve in, and settings (each
/// checked: a known name, a value within its bounds) by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SessionOptions {
    schema: Option<NamespaceName>,
    settings: BTreeMap<String, String>,
}

/// The text of an option's value, as configuration takes it.
fn text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Int64(n) => Some(n.to_string()),
        Value::Double(_) | Value::StringList(_) => None,
    }
}

/// An action's reply: its body, and the `set-cookie` header values that carry the new options.
#[derive(Debug)]
pub(super) struct Reply {
    pub(super) body: Vec<u8>,
    pub(super) cookies: Vec<String>,
}

impl SessionOptions {
    /// The options a call's cookies carry. A cookie is the client's: each is checked as
    /// SetSessionOptions checks it, and one that does not pass (a forged value, a setting this
    /// version does not know, a bound tightened since) is ignored rather than refused, so that no
    /// cookie can shut a client out of the calls that would replace it. At most
    /// [`MAX_COOKIES`] cookies are looked at.
    pub(super) fn from_metadata(metadata: &MetadataMap) -> Self {
        let mut options = Self::default();
        for (name, value) in lake_cookies(metadata) {
            if name == SCHEMA_COOKIE {
                match NamespaceName::parse(&value) {
                    Ok(schema) => options.schema = Some(schema),
                    Err(e) => tracing::debug!(%e, "ignoring the session cookie {SCHEMA_COOKIE}"),
                }
            } else {
                // Only known settings pass: the map holds at most one of each.
                match check_setting(&name, &value) {
                    Ok(checked) => {
                        options.settings.insert(name, checked);
                    }
                    Err(e) => tracing::debug!(?e, name, "ignoring a session setting cookie"),
                }
            }
        }
        options
    }

    /// The options as one `cookie` header's value (what a statement handle carries).
    pub(super) fn header(&self) -> String {
        let schema = self
            .schema
            .iter()
            .map(|s| format!("{SCHEMA_COOKIE}={}", s.as_str()));
        let settings = self.settings.iter().map(|(k, v)| format!("{k}={v}"));
        schema.chain(settings).collect::<Vec<_>>().join("; ")
    }

    /// The options of a `cookie` header's value, checked as a call's cookies are.
    pub(super) fn from_header(header: &str) -> Self {
        let mut metadata = MetadataMap::new();
        if let Ok(value) = header.parse() {
            metadata.insert("cookie", value);
        }
        Self::from_metadata(&metadata)
    }

    /// The schema unqualified table names resolve in, if the session chose one.
    pub(crate) fn schema(&self) -> Option<&NamespaceName> {
        self.schema.as_ref()
    }

    /// The settings the session chose, by name (`lake.vector.nprobes`), as configuration
    /// takes them.
    pub(crate) fn settings(&self) -> impl Iterator<Item = (&str, &str)> {
        self.settings.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// `SetSessionOptions`: each option set, or its error (an unknown name, a value that is not
    /// a schema name, a catalog other than lake's); an option sent without a value is unset.
    pub(super) fn set(&self, body: &[u8]) -> Result<Reply, Status> {
        use prost::Message;
        if body.len() > MAX_REQUEST_BYTES {
            return Err(Status::invalid_argument(format!(
                "a SetSessionOptionsRequest of {} bytes; at most {MAX_REQUEST_BYTES}",
                body.len()
            )));
        }
        let request = proto::SetSessionOptionsRequest::decode(body).map_err(|e| {
            Status::invalid_argument(format!(
                "SetSessionOptions needs a SetSessionOptionsRequest: {e}"
            ))
        })?;
        if request.session_options.len() > MAX_COOKIES {
            return Err(Status::invalid_argument(format!(
                "{} session options in one request; at most {MAX_COOKIES}",
                request.session_options.len()
            )));
        }
        let mut next = self.clone();
        let mut errors = HashMap::new();
        for (name, value) in request.session_options {
            let outcome = match (name.as_str(), value.value) {
                (SCHEMA, None) => {
                    next.schema = None;
                    Ok(())
                }
                (SCHEMA, Some(Value::String(schema))) => NamespaceName::parse(&schema)
                    .map(|schema| next.schema = Some(schema))
                    .map_err(|_| ErrorValue::InvalidValue),
                (CATALOG_OPTION, None) => Ok(()),
                (CATALOG_OPTION, Some(Value::String(catalog))) if catalog == CATALOG => Ok(()),
                (SCHEMA | CATALOG_OPTION, Some(_)) => Err(ErrorValue::InvalidValue),
                (setting, None) if setting.starts_with(SETTINGS) => {
                    next.settings.remove(setting);
                    Ok(())
                }
                (setting, Some(value)) if setting.starts_with(SETTINGS) => {
                    match text(&value).map(|v| check_setting(setting, &v)) {
                        Some(Ok(checked)) => {
                            next.settings.insert(setting.to_owned(), checked);
                            Ok(())
                        }
                        Some(Err(SettingError::Unknown)) => Err(ErrorValue::InvalidName),
                        Some(Err(SettingError::Invalid(_))) | None => Err(ErrorValue::InvalidValue),
                    }
                }
                _ => Err(ErrorValue::InvalidName),
            };
            if let Err(error) = outcome {
                errors.insert(
                    name,
                    proto::SetSessionOptionsError {
                        value: error as i32,
                    },
                );
            }
        }
        let mut cookies = vec![next.cookie()];
        cookies.extend(next.setting_cookies(self));
        Ok(Reply {
            body: proto::SetSessionOptionsResult { errors }.encode_to_vec(),
            cookies,
        })
    }

    /// `GetSessionOptions`: the catalog, and the schema if one is chosen.
    pub(super) fn get(&self) -> Reply {
        use prost::Message;
        let string = |s: &str| SessionOptionValue {
            value: Some(Value::String(s.to_owned())),
        };
        let mut session_options = HashMap::from([(CATALOG_OPTION.to_owned(), string(CATALOG))]);
        if let Some(schema) = &self.schema {
            session_options.insert(SCHEMA.to_owned(), string(schema.as_str()));
        }
        for (name, value) in &self.settings {
            session_options.insert(name.clone(), string(value));
        }
        Reply {
            body: proto::GetSessionOptionsResult { session_options }.encode_to_vec(),
            cookies: Vec::new(),
        }
    }

    /// `CloseSession`: the options are forgotten: every lake cookie the call carried (valid or
    /// not) is expired. A stateless server cannot refuse a closed session's later calls (the
    /// spec's NOT_FOUND); a client that keeps the cookies keeps the options.
    pub(super) fn close(metadata: &MetadataMap) -> Reply {
        use prost::Message;
        let mut cookies = vec![Self::default().cookie()];
        cookies.extend(
            lake_cookies(metadata)
                .into_iter()
                .filter(|(name, _)| name != SCHEMA_COOKIE)
                .map(|(name, _)| format!("{name}=; Path=/; Max-Age=0")),
        );
        Reply {
            body: proto::CloseSessionResult {
                status: proto::CloseStatus::Closed as i32,
            }
            .encode_to_vec(),
            cookies,
        }
    }

    /// The `set-cookie` values that move the client's setting cookies from `before`'s to these:
    /// each setting kept, and an expired cookie for each one dropped.
    fn setting_cookies(&self, before: &Self) -> Vec<String> {
        let kept = self
            .settings
            .iter()
            .map(|(name, value)| format!("{name}={value}; Path=/; HttpOnly"));
        let dropped = before
            .settings
            .keys()
            .filter(|name| !self.settings.contains_key(*name))
            .map(|name| format!("{name}=; Path=/; Max-Age=0"));
        kept.chain(dropped).collect()
    }

    /// The `set-cookie` value that makes the client send these options back (an expired cookie
    /// when there are none).
    fn cookie(&self) -> String {
        match &self.schema {
            Some(schema) => format!("{SCHEMA_COOKIE}={}; Path=/; HttpOnly", schema.as_str()),
            None => format!("{SCHEMA_COOKIE}=; Path=/; Max-Age=0"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn request(options: &[(&str, Option<Value>)]) -> Vec<u8> {
        proto::SetSessionOptionsRequest {
            session_options: options
                .iter()
                .map(|(k, v)| (k.to_string(), SessionOptionValue { value: v.clone() }))
                .collect(),
        }
        .encode_to_vec()
    }

    fn metadata(cookie: &str) -> MetadataMap {
        let mut metadata = MetadataMap::new();
        metadata.insert("cookie", cookie.parse().unwrap());
        metadata
    }

    fn with_cookie(cookie: &str) -> SessionOptions {
        SessionOptions::from_metadata(&metadata(cookie))
    }

    #[test]
    fn a_schema_set_comes_back_in_the_cookie() {
        let reply = SessionOptions::default()
            .set(&request(&[("schema", Some(Value::String("sales".into())))]))
            .unwrap();
        let result = proto::SetSessionOptionsResult::decode(&*reply.body).unwrap();
        assert!(result.errors.is_empty());
        let cookie = reply.cookies[0].split(';').next().unwrap().to_owned();
        let options = with_cookie(&format!("other=1; {cookie}"));
        assert_eq!(options.schema().map(|s| s.as_str()), Some("sales"));
        let got = proto::GetSessionOptionsResult::decode(&*options.get().body).unwrap();
        assert_eq!(
            got.session_options["schema"].value,
            Some(Value::String("sales".into()))
        );
    }

    #[test]
    fn bad_names_and_values_are_reported_per_option() {
        let reply = SessionOptions::default()
            .set(&request(&[
                ("schema", Some(Value::String("../etc".into()))),
                ("catalog", Some(Value::String("other".into()))),
                ("colour", Some(Value::String("blue".into()))),
                ("schema2", None),
            ]))
            .unwrap();
        let errors = proto::SetSessionOptionsResult::decode(&*reply.body)
            .unwrap()
            .errors;
        let error = |name: &str| errors[name].value;
        assert_eq!(error("schema"), ErrorValue::InvalidValue as i32);
        assert_eq!(error("catalog"), ErrorValue::InvalidValue as i32);
        assert_eq!(error("colour"), ErrorValue::InvalidName as i32);
        assert_eq!(error("schema2"), ErrorValue::InvalidName as i32);
        // Nothing was chosen: the cookie is cleared.
        assert!(
            reply.cookies[0].contains("Max-Age=0"),
            "{}",
            reply.cookies[0]
        );
    }

    #[test]
    fn settings_are_checked_and_carried_by_name() {
        let reply = SessionOptions::default()
            .set(&request(&[
                ("lake.vector.nprobes", Some(Value::Int64(64))),
                (
                    "lake.vector.refine_factor",
                    Some(Value::String("1000".into())),
                ),
                ("lake.vector.nope", Some(Value::String("1".into()))),
            ]))
            .unwrap();
        let errors = proto::SetSessionOptionsResult::decode(&*reply.body)
            .unwrap()
            .errors;
        assert_eq!(
            errors["lake.vector.refine_factor"].value,
            ErrorValue::InvalidValue as i32
        );
        assert_eq!(
            errors["lake.vector.nope"].value,
            ErrorValue::InvalidName as i32
        );
        assert!(!errors.contains_key("lake.vector.nprobes"));
        let cookies: Vec<&str> = reply
            .cookies
            .iter()
            .map(|c| c.split(';').next().unwrap())
            .collect();
        assert!(cookies.contains(&"lake.vector.nprobes=64"), "{cookies:?}");
        let options = with_cookie(&cookies.join("; "));
        assert_eq!(
            options.settings().collect::<Vec<_>>(),
            [("lake.vector.nprobes", "64")]
        );
        // A cookie is the client's: checked as SetSessionOptions checks, ignored if it fails.
        assert_eq!(
            with_cookie("lake.vector.nprobes=99999999"),
            SessionOptions::default()
        );
        assert_eq!(
            with_cookie("lake.datafusion.x=1"),
            SessionOptions::default()
        );
        // Unset, and closed: the cookie is expired, even one this version does not know.
        let reply = options
            .set(&request(&[("lake.vector.nprobes", None)]))
            .unwrap();
        assert!(
            reply
                .cookies
                .iter()
                .any(|c| c == "lake.vector.nprobes=; Path=/; Max-Age=0")
        );
        let closed = SessionOptions::close(&metadata("lake.vector.nprobes=64; lake.vector.new=1"));
        for name in ["lake_schema", "lake.vector.nprobes", "lake.vector.new"] {
            assert!(
                closed
                    .cookies
                    .iter()
                    .any(|c| c.starts_with(&format!("{name}=;"))),
                "{name}: {:?}",
                closed.cookies
            );
        }
    }

    #[test]
    fn a_forged_cookie_is_checked_like_a_name_and_ignored() {
        assert_eq!(
            with_cookie("lake_schema=Robert'); DROP"),
            SessionOptions::default()
        );
        assert_eq!(with_cookie("lake_schema="), SessionOptions::default());
        // Another application's cookie that is not text does not hide lake's.
        let mut metadata = MetadataMap::new();
        metadata.insert(
            "cookie",
            tonic::metadata::AsciiMetadataValue::try_from(&b"other=\xff; lake_schema=sales"[..])
                .unwrap(),
        );
        assert_eq!(
            SessionOptions::from_metadata(&metadata)
                .schema()
                .map(|s| s.as_str()),
            Some("sales")
        );
        // Many cookies: only the first few are looked at.
        let many: Vec<String> = (0..1000).map(|i| format!("c{i}=1")).collect();
        assert_eq!(
            with_cookie(&format!("{}; lake_schema=sales", many.join("; "))),
            SessionOptions::default()
        );
        // What a handle carries comes back the same.
        let chosen = with_cookie("lake_schema=sales; lake.vector.nprobes=64");
        assert_eq!(SessionOptions::from_header(&chosen.header()), chosen);
    }

    #[test]
    fn a_request_of_too_many_options_is_refused() {
        let names: Vec<String> = (0..100).map(|i| format!("o{i}")).collect();
        let options: Vec<(&str, Option<Value>)> =
            names.iter().map(|n| (n.as_str(), None)).collect();
        let err = SessionOptions::default()
            .set(&request(&options))
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
    }

    #[test]
    fn unsetting_and_closing_forget_the_schema() {
        let chosen = with_cookie("lake_schema=sales");
        let reply = chosen.set(&request(&[("schema", None)])).unwrap();
        assert!(reply.cookies[0].contains("Max-Age=0"));
        let closed = SessionOptions::close(&metadata("lake_schema=sales"));
        let status = proto::CloseSessionResult::decode(&*closed.body)
            .unwrap()
            .status;
        assert_eq!(status, proto::CloseStatus::Closed as i32);
        assert!(closed.cookies[0].contains("Max-Age=0"));
    }
}
