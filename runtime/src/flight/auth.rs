//! Bearer-token authentication for the Flight SQL endpoints.
//!
//! Tokens come from a file (one per line; `#` comments and blank lines ignored), typically a
//! mounted Kubernetes Secret. Every call must carry `authorization: Bearer <token>`, or `Basic`
//! credentials whose password is a token (clients such as the Go driver send Basic on every call).
//! `Handshake` turns Basic credentials into the Bearer header JDBC and ADBC expect. Tokens are
//! never logged or echoed in errors.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use base64::Engine;
use base64::prelude::{BASE64_STANDARD, BASE64_STANDARD_NO_PAD};
use tonic::metadata::MetadataMap;
use tonic::{Request, Status};

#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("cannot read the token file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the token file {0} holds no token; every client would be refused")]
    Empty(String),
}

/// The accepted tokens; `None` in a server means authentication is off.
#[derive(Clone)]
pub struct Tokens(Arc<HashSet<String>>);

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokens({} redacted)", self.0.len())
    }
}

impl Tokens {
    /// Whether a token of `self` is also one of `other`'s (a read token must never write).
    pub fn overlaps(&self, other: &Tokens) -> bool {
        self.0.iter().any(|t| other.0.contains(t))
    }

    pub fn from_file(path: &Path) -> Result<Self, TokenFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| TokenFileError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let tokens: HashSet<String> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_owned)
            .collect();
        if tokens.is_empty() {
            return Err(TokenFileError::Empty(path.display().to_string()));
        }
        Ok(Self(Arc::new(tokens)))
    }

    /// The token a request presents, if it is valid.
    pub fn authenticate(&self, metadata: &MetadataMap) -> Result<String, Status> {
        let header = metadata
            .get("authorization")
            .ok_or_else(|| Status::unauthenticated("authentication required: send a Bearer token (or Basic credentials with the token as password)"))?
            .to_str()
            .map_err(|_| Status::unauthenticated("the authorization header is not text"))?;
        let token = if let Some(token) = header.strip_prefix("Bearer ") {
            token.trim().to_owned()
        } else if let Some(encoded) = header.strip_prefix("Basic ") {
            // Go's Flight client (under ADBC) encodes without padding; others pad.
            let encoded = encoded.trim();
            let decoded = BASE64_STANDARD
                .decode(encoded)
                .or_else(|_| BASE64_STANDARD_NO_PAD.decode(encoded))
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| Status::unauthenticated("malformed Basic credentials"))?;
            let (_, password) = decoded
                .split_once(':')
                .ok_or_else(|| Status::unauthenticated("malformed Basic credentials"))?;
            password.to_owned()
        } else {
            return Err(Status::unauthenticated(
                "unsupported authorization scheme; use Bearer or Basic",
            ));
        };
        if self.0.contains(&token) {
            Ok(token)
        } else {
            Err(Status::unauthenticated("invalid token"))
        }
    }

    /// The tonic interceptor checking every call.
    pub fn interceptor(self) -> impl Fn(Request<()>) -> Result<Request<()>, Status> + Clone {
        move |request: Request<()>| {
            self.authenticate(request.metadata())?;
            Ok(request)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> Tokens {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, "# clients\nsecret-1\n\n  secret-2  \n").unwrap();
        Tokens::from_file(&path).unwrap()
    }

    fn with(header: &str) -> MetadataMap {
        let mut m = MetadataMap::new();
        m.insert("authorization", header.parse().unwrap());
        m
    }

    #[test]
    fn bearer_and_basic_are_accepted_only_with_a_listed_token() {
        let t = tokens();
        assert_eq!(
            t.authenticate(&with("Bearer secret-1")).unwrap(),
            "secret-1"
        );
        let basic = format!("Basic {}", BASE64_STANDARD.encode("anyone:secret-2"));
        assert_eq!(t.authenticate(&with(&basic)).unwrap(), "secret-2");
        let unpadded = format!("Basic {}", BASE64_STANDARD_NO_PAD.encode("anyone:secret-2"));
        assert_eq!(t.authenticate(&with(&unpadded)).unwrap(), "secret-2");
        for bad in [
            "Bearer nope",
            "Basic !!!",
            "Token secret-1",
            "Bearer # clients",
        ] {
            let err = t.authenticate(&with(bad)).unwrap_err();
            assert_eq!(err.code(), tonic::Code::Unauthenticated, "{bad}");
            assert!(
                !err.message().contains("secret"),
                "tokens never appear in errors"
            );
        }
        assert_eq!(
            t.authenticate(&MetadataMap::new()).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        assert!(!format!("{t:?}").contains("secret"));
    }

    #[test]
    fn an_empty_token_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, "# nothing\n\n").unwrap();
        assert!(matches!(
            Tokens::from_file(&path),
            Err(TokenFileError::Empty(_))
        ));
    }
}
