//! Who may talk on the worker port: mutual TLS with the cluster's CA. A worker executes the
//! plans it is sent with the pod's own read access, so only this cluster's query processes —
//! holding a certificate the cluster's CA signed — may connect, and a worker answers only
//! under a name those processes expect.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

/// The name workers of a local lake answer as (their certificate's subject).
pub const LOCAL_WORKER_NAME: &str = "lake-worker";

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("cannot read the worker {what} {}: {source}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write the worker identity to {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot issue a worker certificate: {0}")]
    Issue(#[from] rcgen::Error),
}

/// A worker-port identity: this process's certificate and key (used both to serve and to
/// connect), the CA whose certificates are admitted, and the name workers answer as.
#[derive(Clone)]
pub struct WorkerIdentity {
    cert: Vec<u8>,
    key: Vec<u8>,
    ca: Vec<u8>,
    server_name: String,
}

impl std::fmt::Debug for WorkerIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerIdentity")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

const CERT: &str = "worker.pem";
const KEY: &str = "worker.key";
const CA: &str = "ca.pem";

impl WorkerIdentity {
    /// The identity in PEM files (what the operator mounts in a query pod).
    pub fn from_files(
        cert: &Path,
        key: &Path,
        ca: &Path,
        server_name: &str,
    ) -> Result<Self, IdentityError> {
        let read = |what, path: &Path| {
            std::fs::read(path).map_err(|source| IdentityError::Read {
                what,
                path: path.to_owned(),
                source,
            })
        };
        Ok(Self {
            cert: read("certificate", cert)?,
            key: read("key", key)?,
            ca: read("CA", ca)?,
            server_name: server_name.to_owned(),
        })
    }

    /// The identity `write_to` left in `dir`.
    pub fn from_dir(dir: &Path) -> Result<Self, IdentityError> {
        Self::from_files(
            &dir.join(CERT),
            &dir.join(KEY),
            &dir.join(CA),
            LOCAL_WORKER_NAME,
        )
    }

    /// A CA made now and one certificate it signed, for the processes of one local lake: the
    /// CA's key is dropped, so no other certificate can ever be admitted.
    pub fn ephemeral() -> Result<Self, IdentityError> {
        let now = time::OffsetDateTime::now_utc();
        let valid = |params: &mut CertificateParams| {
            params.not_before = now - time::Duration::minutes(5);
            params.not_after = now + time::Duration::days(365);
        };
        let mut ca = CertificateParams::new(Vec::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca.distinguished_name
            .push(DnType::CommonName, "lake local workers CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        valid(&mut ca);
        let ca_key = KeyPair::generate()?;
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, ca_key);
        let mut leaf = CertificateParams::new(vec![LOCAL_WORKER_NAME.to_owned()])?;
        leaf.distinguished_name
            .push(DnType::CommonName, LOCAL_WORKER_NAME);
        leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        leaf.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        leaf.use_authority_key_identifier_extension = true;
        valid(&mut leaf);
        let key = KeyPair::generate()?;
        let cert = leaf.signed_by(&key, &issuer)?;
        Ok(Self {
            cert: cert.pem().into_bytes(),
            key: key.serialize_pem().into_bytes(),
            ca: ca_cert.pem().into_bytes(),
            server_name: LOCAL_WORKER_NAME.to_owned(),
        })
    }

    /// Writes the identity to `dir` (created, readable by this user only), for worker processes
    /// this one starts.
    pub fn write_to(&self, dir: &Path) -> Result<(), IdentityError> {
        let failed = |path: &Path| {
            let path = path.to_owned();
            move |source| IdentityError::Write { path, source }
        };
        std::fs::create_dir_all(dir).map_err(failed(dir))?;
        for (name, bytes) in [(CERT, &self.cert), (KEY, &self.key), (CA, &self.ca)] {
            let path = dir.join(name);
            write_private(&path, bytes).map_err(failed(&path))?;
        }
        Ok(())
    }

    pub(super) fn server(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(Identity::from_pem(&self.cert, &self.key))
            .client_ca_root(Certificate::from_pem(&self.ca))
    }

    pub(super) fn client(&self) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .identity(Identity::from_pem(&self.cert, &self.key))
            .domain_name(self.server_name.clone())
    }
}

/// `bytes` in a new file only this user may read (replacing what was there).
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    options.mode(0o600);
    options.open(path)?.write_all(bytes)
}
