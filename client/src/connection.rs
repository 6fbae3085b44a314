//! Dialing a Flight SQL endpoint: `grpc://`, `grpc+tcp://` or `grpc+tls://` (with an explicit CA),
//! and an optional bearer token on every call.

use arrow_flight::sql::client::FlightSqlServiceClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use crate::ClientError;

/// How to reach a lake's endpoints. Each role has its own token (a LakeCluster's
/// `<name>-query-token` and `<name>-metadata-token` Secrets): the query token is sent only to
/// the query endpoint, the metadata token only to the metadata endpoint.
#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    /// The bearer token of the query endpoint (reads, stage discovery).
    pub query_token: Option<String>,
    /// The bearer token of the metadata endpoint (writes); without it, writes to an endpoint
    /// that requires tokens are refused as unauthenticated.
    pub metadata_token: Option<String>,
    /// The PEM certificate of the CA that signed the servers' certificates (`grpc+tls://`).
    pub tls_ca: Option<Vec<u8>>,
}

/// Whether `endpoint` is dialed with TLS.
pub(crate) fn is_tls(endpoint: &str) -> Result<bool, ClientError> {
    dial_url(endpoint).map(|(_, tls)| tls)
}

/// `grpc://host:port` (or `grpc+tcp://`) → the HTTP/2 URL tonic dials; `grpc+tls://` → https.
fn dial_url(endpoint: &str) -> Result<(String, bool), ClientError> {
    if let Some(rest) = endpoint.strip_prefix("grpc+tls://") {
        return Ok((format!("https://{rest}"), true));
    }
    endpoint
        .strip_prefix("grpc://")
        .or_else(|| endpoint.strip_prefix("grpc+tcp://"))
        .map(|rest| (format!("http://{rest}"), false))
        .ok_or_else(|| ClientError::Endpoint(endpoint.to_owned()))
}

/// A connected Flight SQL client for `endpoint`, sending `token` on every call and trusting
/// `tls_ca` for `grpc+tls://`.
pub async fn flight_sql(
    endpoint: &str,
    token: Option<&str>,
    tls_ca: Option<&[u8]>,
) -> Result<FlightSqlServiceClient<Channel>, ClientError> {
    let (url, tls) = dial_url(endpoint)?;
    let connect = |source| ClientError::Connect {
        endpoint: endpoint.to_owned(),
        source,
    };
    let mut dial =
        Endpoint::from_shared(url).map_err(|_| ClientError::Endpoint(endpoint.to_owned()))?;
    if tls {
        // No bundled root store: the CA to trust is explicit.
        let ca = tls_ca.ok_or(ClientError::NoCa)?.to_vec();
        let config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
        dial = dial.tls_config(config).map_err(connect)?;
    }
    let channel = dial.connect().await.map_err(connect)?;
    let mut client = FlightSqlServiceClient::new(channel);
    if let Some(token) = token {
        client.set_token(token.to_owned());
    }
    Ok(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_map_to_dial_urls() {
        assert_eq!(
            dial_url("grpc://127.0.0.1:8815").unwrap(),
            ("http://127.0.0.1:8815".into(), false)
        );
        assert_eq!(
            dial_url("grpc+tls://lake:443").unwrap(),
            ("https://lake:443".into(), true)
        );
        assert!(matches!(
            dial_url("http://x"),
            Err(ClientError::Endpoint(e)) if e == "http://x"
        ));
    }
}
